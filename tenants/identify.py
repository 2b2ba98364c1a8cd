"""Who sent a request: a declared tenant, from an API key or a JWT in its headers.

The credential is read from ``Authorization: Bearer <token>`` (what OpenAI SDKs send) or
``api-key: <token>`` (what Azure OpenAI clients send). A token shaped like a director key
(``api_keys``) is checked against the key table, anything else as a JWT when the policy
configures one. The tenant must be declared in the policy: a key or token for a tenant
that was removed identifies nobody. Refusals carry a reason (a bounded metric label) and
a message that never repeats the credential. A key that cannot be checked because no key
table is known yet (``api_keys.KeysUnknown``) is refused with ``state_unavailable``, which
the balancer answers 503, not 401: the key may well be valid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from policies.model import Identity, Tenant
from tenants.api_keys import KeysUnknown, StoredKey, looks_like_key
from tenants.jwt_auth import JwtRefused, JwtVerifier

REASONS = ("missing", "malformed", "invalid_key", "unknown_tenant", "expired", "audience",
           "issuer", "signature", "algorithm", "unknown_key", "no_tenant", "invalid",
           "jwt_disabled", "keys_disabled", "state_unavailable", "jwks_unavailable")
STATE_UNAVAILABLE = "state_unavailable"
# not the caller's fault: the balancer cannot check yet (answered 503, not 401)
UNAVAILABLE = frozenset({STATE_UNAVAILABLE, "jwks_unavailable"})


@dataclass(frozen=True)
class Identified:
    tenant: Tenant
    via: str  # "api-key" or "jwt"
    credential: str  # the key id, or the JWT's subject: never the secret


@dataclass(frozen=True)
class Refused:
    reason: str  # one of REASONS
    message: str


def credential(headers: Mapping[str, str]) -> str | None:
    """The bearer token or ``api-key`` header value, or None."""
    auth = headers.get("Authorization") or headers.get("authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None
    key = headers.get("api-key")
    return key.strip() if key and key.strip() else None


class Identifier:
    """Identifies requests for one policy's ``identity`` and ``tenants``."""

    def __init__(self, identity: Identity, tenants: Mapping[str, Tenant],
                 check_key: Callable[[str], StoredKey | None] | None,
                 verifier: JwtVerifier | None) -> None:
        self.identity = identity
        self.tenants = dict(tenants)
        self.check_key = check_key
        self.verifier = verifier

    async def identify(self, headers: Mapping[str, str]) -> Identified | Refused:
        token = credential(headers)
        if token is None:
            return Refused("missing", "You didn't provide an API key. Send it as "
                           "'Authorization: Bearer <key>'.")
        if looks_like_key(token):
            return self._by_key(token)
        if self.verifier is None:
            if token.count(".") == 2:
                return Refused("jwt_disabled", "This deployment does not accept JWTs.")
            return Refused("malformed", "Incorrect API key provided.")
        try:
            verified = await self.verifier.verify(token)
        except JwtRefused as exc:
            return Refused(exc.reason, str(exc))
        tenant = self.tenants.get(verified.tenant)
        if tenant is None:
            return Refused("unknown_tenant", "The token names no tenant of this deployment.")
        return Identified(tenant, "jwt", verified.subject or "")

    def _by_key(self, token: str) -> Identified | Refused:
        if self.check_key is None or not self.identity.api_keys:
            return Refused("keys_disabled", "This deployment does not accept API keys.")
        try:
            stored = self.check_key(token)
        except KeysUnknown:
            return Refused(STATE_UNAVAILABLE, "API keys cannot be checked yet: the shared state is "
                           "unreachable and this balancer has no saved key table. Retry "
                           "shortly.")
        if stored is None:
            return Refused("invalid_key", "Incorrect API key provided.")
        tenant = self.tenants.get(stored.tenant)
        if tenant is None:
            return Refused("unknown_tenant", "The API key's tenant is not served here.")
        return Identified(tenant, "api-key", stored.key_id)
