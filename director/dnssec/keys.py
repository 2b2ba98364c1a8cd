"""One DNSSEC key of a zone: its private key, role and timings.

A key is a combined signing key (``csk``: signs everything, its DS at the parent), a
key-signing key (``ksk``: signs the DNSKEY RRset, its DS at the parent) or a zone-signing
key (``zsk``: signs everything else). Timings are POSIX seconds (RFC 7583 names):
``publish`` (its DNSKEY appears), ``activate`` (it signs), ``retire`` (it stops signing),
``remove`` (its DNSKEY goes), and for KSK/CSK ``ds_seen`` (the operator confirmed its DS
at the parent) and ``ds_gone`` (its DS was withdrawn there). ``None`` is "not scheduled".
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

import dns.dnssec
import dns.name
import dns.rdtypes.ANY.DNSKEY
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

ECDSAP256SHA256 = 13
ED25519 = 15
ALGORITHMS = {"ecdsap256sha256": ECDSAP256SHA256, "ed25519": ED25519}
SEP = 0x0001  # the secure-entry-point flag: KSK and CSK
ZONE_FLAG = 0x0100

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class Role(enum.Enum):
    CSK = "csk"
    KSK = "ksk"
    ZSK = "zsk"

    @property
    def signs_keys(self) -> bool:
        return self is not Role.ZSK

    @property
    def signs_zone(self) -> bool:
        return self is not Role.KSK


@dataclass(frozen=True)
class ZoneKey:
    """A key of ``zone`` (lower case, no trailing dot) with its timings."""

    zone: str
    role: Role
    algorithm: int
    private_key: PrivateKey
    created: float
    publish: float
    activate: float | None
    retire: float | None = None
    remove: float | None = None
    ds_seen: float | None = None
    ds_gone: float | None = None

    @property
    def dnskey(self) -> dns.rdtypes.ANY.DNSKEY.DNSKEY:
        flags = ZONE_FLAG | (SEP if self.role.signs_keys else 0)
        return dns.dnssec.make_dnskey(self.private_key.public_key(), self.algorithm, flags)

    @property
    def tag(self) -> int:
        return dns.dnssec.key_id(self.dnskey)

    @property
    def apex(self) -> dns.name.Name:
        return dns.name.from_text(self.zone)

    def ds_text(self) -> str:
        """The DS record for the parent (SHA-256 digest), in presentation format."""
        ds = dns.dnssec.make_ds(self.apex, self.dnskey, "SHA256")
        return f"{self.zone}. IN DS {ds.to_text()}"

    def with_times(self, **times: float | None) -> ZoneKey:
        return dataclasses.replace(self, **times)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        pem = self.private_key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())
        return {"zone": self.zone, "role": self.role.value, "algorithm": self.algorithm,
                "tag": self.tag, "private_key": pem.decode(), "created": self.created,
                "publish": self.publish, "activate": self.activate, "retire": self.retire,
                "remove": self.remove, "ds_seen": self.ds_seen, "ds_gone": self.ds_gone}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ZoneKey:
        """A key from ``to_json``'s form; ValueError for anything malformed."""
        try:
            private = serialization.load_pem_private_key(data["private_key"].encode(), None)
            algorithm = int(data["algorithm"])
            key = cls(zone=str(data["zone"]).lower().rstrip("."), role=Role(data["role"]),
                      algorithm=algorithm, private_key=_checked(private, algorithm),
                      created=float(data["created"]), publish=float(data["publish"]),
                      activate=_time(data.get("activate")), retire=_time(data.get("retire")),
                      remove=_time(data.get("remove")), ds_seen=_time(data.get("ds_seen")),
                      ds_gone=_time(data.get("ds_gone")))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed key: {exc!r}") from None
        if "tag" in data and int(data["tag"]) != key.tag:
            raise ValueError(f"key tag {data['tag']} does not match its key ({key.tag})")
        return key


def generate(zone: str, role: Role, now: float, *, algorithm: int = ECDSAP256SHA256,
             publish: float | None = None, activate: float | None = None) -> ZoneKey:
    """A new key for ``zone``, published and active at ``now`` unless told otherwise."""
    private: PrivateKey
    if algorithm == ECDSAP256SHA256:
        private = ec.generate_private_key(ec.SECP256R1())
    elif algorithm == ED25519:
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        raise ValueError(f"unsupported algorithm {algorithm} (13 or 15)")
    return ZoneKey(zone.lower().rstrip("."), role, algorithm, private, now,
                   now if publish is None else publish, now if activate is None else activate)


def _checked(private: object, algorithm: int) -> PrivateKey:
    if algorithm == ECDSAP256SHA256 and isinstance(private, ec.EllipticCurvePrivateKey) \
            and isinstance(private.curve, ec.SECP256R1):
        return private
    if algorithm == ED25519 and isinstance(private, ed25519.Ed25519PrivateKey):
        return private
    raise ValueError(f"the private key does not fit algorithm {algorithm}")


def _time(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
