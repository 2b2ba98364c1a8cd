"""Real signing keys and tokens for the identity tests: an RSA and an EC key published in a
JWKS, and a stranger's RSA key under the same key id (a forged signature)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://auth.example.com"
AUDIENCE = "director"


@dataclass
class Signer:
    kid: str
    alg: str
    private: Any

    def token(self, *, tenant: str | None = "acme", exp: float | None = 300.0,
              aud: str | None = AUDIENCE, iss: str | None = ISSUER, claim: str = "tenant",
              kid: str | None = None, **extra: Any) -> str:
        now = time.time()
        claims: dict[str, Any] = {"sub": "user-1", "iat": int(now), **extra}
        if tenant is not None:
            claims[claim] = tenant
        if exp is not None:
            claims["exp"] = int(now + exp)
        if aud is not None:
            claims["aud"] = aud
        if iss is not None:
            claims["iss"] = iss
        return jwt.encode(claims, self.private, algorithm=self.alg,
                          headers={"kid": kid or self.kid})


def rsa_signer(kid: str = "rsa-1") -> Signer:
    return Signer(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_signer(kid: str = "ec-1") -> Signer:
    return Signer(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def jwks(*signers: Signer) -> dict[str, Any]:
    keys = []
    for signer in signers:
        algorithm = RSAAlgorithm if signer.alg.startswith("RS") else ECAlgorithm
        entry = json.loads(algorithm.to_jwk(signer.private.public_key()))
        keys.append({**entry, "kid": signer.kid, "alg": signer.alg, "use": "sig"})
    return {"keys": keys}


def write_jwks(path: Path, *signers: Signer) -> Path:
    path.write_text(json.dumps(jwks(*signers)), encoding="utf-8")
    return path
