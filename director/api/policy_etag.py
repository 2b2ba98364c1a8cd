"""The policy's HTTP entity tag, and the ``If-Match`` a writer sends with ``PUT``.

``GET /api/v1/policy`` answers ``ETag: "<version>-<digest[:16]>"``; a ``PUT`` with
``If-Match`` naming it (or the bare version number, ``If-Match: 7``) replaces the policy only
while that version is still the stored one, else 412. ``If-Match: *`` and no header at all
replace whatever is stored (scripts written before the header existed keep working).
"""

from __future__ import annotations

from dataclasses import dataclass

from director.api.errors import ApiError
from state.policy_identity import PolicyIdentity

DIGEST_LENGTH = 16


@dataclass(frozen=True)
class Expected:
    """The stored version a write expects, and the start of its digest when the tag names
    one."""

    version: int
    digest: str = ""


def etag(identity: PolicyIdentity) -> str:
    """The quoted entity tag of ``identity``."""
    return f'"{identity.version or 0}-{identity.digest[:DIGEST_LENGTH]}"'


def parse_if_match(header: str | None) -> Expected | None:
    """The expectation of an ``If-Match`` header (None: absent or ``*``); raises ``ApiError``
    (400) for one that names no version."""
    if header is None:
        return None
    items = [part.strip() for part in header.split(",") if part.strip()]
    if items == ["*"]:
        return None
    if len(items) != 1:
        raise ApiError("If-Match: name one version: the ETag of GET /api/v1/policy, or its "
                       "version number", status=400)
    tag = items[0].removeprefix("W/").strip('"')
    number, _, digest = tag.partition("-")
    if not number.isdigit() or not all(c in "0123456789abcdef" for c in digest):
        raise ApiError(f"If-Match: expected the ETag of GET /api/v1/policy "
                       f"(\"<version>-<digest>\") or a version number, got {items[0]!r}",
                       status=400)
    return Expected(int(number), digest)
