"""Which policy an API instance starts from: the newest accepted version in its store
directory, else its ``--policy`` file.

The store directory holds every version the API accepted (``policy_disk``). Starting from
the newest of them, with its number, means a restarted API never offers Redis an older
policy than the fleet serves, even when Redis lost its data meanwhile. Each version passes
the policy gate again (its stored proof digests trusted, as a record's are); one that does
not (a stricter gate since) is logged and the next older one is tried, at most
``MAX_TRIED``, then the file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from director.api.config import PolicyDocument
from director.api.policy_disk import PolicyDisk
from policies import Policy
from state.policy_identity import policy_digest

log = logging.getLogger(__name__)

MAX_TRIED = 8  # versions from the newest down, each through the whole gate


@dataclass(frozen=True)
class Start:
    """The policy to start from: its source, the accepted policy, proofs and version
    (0: the file, never stored)."""

    document: PolicyDocument
    policy: Policy
    proofs: tuple[str, ...]
    version: int


def starting_policy(configured: PolicyDocument, disk: PolicyDisk | None) -> Start:
    """The newest accepted version on ``disk``, else ``configured``; raises
    ``policies.PolicyError`` when it falls back to a file that does not load."""
    if disk is not None:
        for tried, stored in enumerate(disk.newest()):
            if tried == MAX_TRIED:
                log.error("api: the newest %d versions in %s do not load; starting from %s",
                          MAX_TRIED, disk.directory, configured.name)
                break
            document = PolicyDocument(stored.name, stored.text, dict(stored.files))
            acceptance = document.accept(stored.proofs)
            if acceptance.policy is None:
                log.error("api: policy version %d in %s does not load now; trying the one "
                          "before:\n%s", stored.version, disk.directory,
                          acceptance.error().render())
                continue
            if stored.digest != policy_digest(configured.name, configured.text,
                                              configured.files):
                log.warning("api: starting from policy version %d, the newest accepted in %s; "
                            "--policy %s differs from it and is not used (PUT it to make it "
                            "active)", stored.version, disk.directory, configured.name)
            return Start(document, acceptance.policy, acceptance.proofs, stored.version)
    acceptance = configured.accept()
    if acceptance.policy is None:
        raise acceptance.error()
    return Start(configured, acceptance.policy, acceptance.proofs, 0)

