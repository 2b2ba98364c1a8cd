"""What one admin API instance is configured with, and where it may listen."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from director import policy_gate
from director.policy_gate import Acceptance
from policies import Policy
from state.ports import parse_hostport

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_MAX_BODY = 1024 * 1024
DEFAULT_BALANCER_PORT = 8080
DEFAULT_POLICY_DEADLINE = 120.0  # seconds a policy may take through the gate when PUT


@dataclass(frozen=True)
class PolicyDocument:
    """A policy's source: the main file's name and text, and its included files by path."""

    name: str
    text: str
    files: Mapping[str, str] = field(default_factory=dict)

    def accept(self, proven: Collection[str] = (),
               deadline_s: float | None = None) -> Acceptance:
        """Through the policy gate: both residency proofs (engine proofs whose digests are
        in ``proven`` trusted) and the lint, refused past ``deadline_s``."""
        return policy_gate.accept_text(self.text, self.name, self.files, proven=proven,
                                       deadline_s=deadline_s)

    def load(self) -> Policy:
        """The accepted policy; raises ``policies.PolicyError``."""
        return policy_gate.load_text(self.text, self.name, self.files)

    @classmethod
    def from_file(cls, path: str) -> tuple[PolicyDocument, Policy]:
        """Read ``path`` and its includes; raises ``policies.PolicyError`` listing problems."""
        acceptance = policy_gate.accept(path)
        if acceptance.policy is None:
            raise acceptance.error()
        result = acceptance.result
        files = {name: text for name, text in result.sources.items() if name != path}
        return cls(path, result.sources[path], files), acceptance.policy


@dataclass(frozen=True)
class ApiConfig:
    """Everything ``build_api`` needs; the CLI fills it from ``director api serve``."""

    policy: PolicyDocument
    redis_url: str
    tokens_path: Path | None = None
    audit_path: Path | None = None
    control_socket: Path | None = None
    dns_listen: tuple[str, ...] = ()
    policy_store: Path | None = None
    geoip_path: str | None = None
    balancer_port: int = DEFAULT_BALANCER_PORT
    max_body: int = DEFAULT_MAX_BODY
    policy_deadline: float = DEFAULT_POLICY_DEADLINE  # a PUT's check, then refused (422)
    prefix: str = "director"
    enable_chaos: bool = False  # mount the chaos routes (director up turns them on)
    follow_interval: float = 1.0  # how often the Redis policy version is polled (seconds)
    state_timeout: float = 1.0  # Redis socket timeouts (seconds)
    listen: str = ""  # where this instance serves, for its heartbeat (state.instances)


def parse_listen(text: str) -> tuple[str, int]:
    """``"127.0.0.1:8080"`` or ``"[::1]:8080"`` -> host and port; raises ``ValueError``."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise ValueError(f"listen: {exc}") from None


