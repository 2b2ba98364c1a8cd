"""Tenants at the regional balancer: who sent a request (API keys, JWTs) and what each may
take (quotas shared through the state store)."""

from tenants.api_keys import KeyTable, NewKey, StoredKey, new_key, revoke_key, store_key
from tenants.identify import Identified, Identifier, Refused
from tenants.jwt_auth import JwtRefused, JwtVerifier
from tenants.quota import Admission, QuotaGate

__all__ = ["Admission", "Identified", "Identifier", "JwtRefused", "JwtVerifier", "KeyTable",
           "NewKey", "QuotaGate", "Refused", "StoredKey", "new_key", "revoke_key",
           "store_key"]
