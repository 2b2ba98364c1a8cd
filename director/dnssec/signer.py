"""Online signing: RRSIGs for a response's RRsets, cached per validity window.

``ZoneSigner.sign(rrset)`` returns the RRSIG RRset covering ``rrset`` by every key that
signs it now (``timeline.state_at``): the key signers for DNSKEY, CDS and CDNSKEY, the zone
signers for the rest. Signatures are deterministic ECDSA (RFC 6979) or Ed25519
(``rrsig``), so every server of a zone makes the same bytes, and are kept per RRset until
the *epoch* changes.

The epoch is the validity window (a day by default) together with what the keys do. Each
window's signatures run from an hour before the window starts (clock skew) to
``validity`` after it (two weeks): an answer cached anywhere expires long before its
signature. The key directory is read again when its files change (checked every
``poll`` seconds) and at every moment the timeline changes, so a rollover takes effect on
time without a restart; ``epoch()`` is what the answer caches compare to know their
signed answers are still good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import ClassVar

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from director.dnssec.key_directory import directory_version, load_keys
from director.dnssec.keys import ZoneKey
from director.dnssec.rrsig import RrsetSigner
from director.dnssec.timeline import KeyState, next_change, state_at

log = logging.getLogger(__name__)

WINDOW = 86400.0
VALIDITY = 14 * 86400.0
SKEW = 3600.0
POLL = 5.0
MAX_CACHED = 100_000
KEY_TYPES = frozenset({dns.rdatatype.DNSKEY, dns.rdatatype.CDS, dns.rdatatype.CDNSKEY})
_UNSIGNED = frozenset({dns.rdatatype.RRSIG, dns.rdatatype.OPT})


class NoKeys(Exception):
    """The key directory holds no usable key for the zone."""


class Unsigned(Exception):
    """An RRset of the answer has no signature (a keyless edge without it, or no key that
    signs now): the answer is SERVFAIL, never sent unsigned."""


def add_rrsigs(response: dns.message.Message,
               sign: Callable[[dns.rrset.RRset], dns.rrset.RRset | None]) -> None:
    """Put after each RRset of ``response``'s three sections the RRSIGs ``sign`` gives it
    (``Unsigned`` when it gives none)."""
    for section in (response.answer, response.authority, response.additional):
        signed: list[dns.rrset.RRset] = []
        for rrset in section:
            signed.append(rrset)
            if rrset.rdtype not in _UNSIGNED:
                sigs = sign(rrset)
                if sigs is None:
                    raise Unsigned(rrset.to_text())
                signed.append(sigs)
        section[:] = signed


class ZoneSigner:
    """Signs the RRsets of one zone with the keys of a directory."""

    compact = True  # denial: compact NSEC made per name (``denial``)
    chain: ClassVar[list[dns.rrset.RRset]] = []  # a classic NSEC chain: keyless edges

    def __init__(self, zone: str, directory: Path, dnskey_ttl: int, *,
                 clock: Callable[[], float] = time.time, window: float = WINDOW,
                 validity: float = VALIDITY, poll: float | None = None) -> None:
        self.zone = zone.lower().rstrip(".")
        self.apex = dns.name.from_text(self.zone)
        self.directory = directory
        self.dnskey_ttl = dnskey_ttl
        self.clock = clock
        self.window = window
        self.validity = validity
        self.poll = POLL if poll is None else poll
        self.signed = 0  # signatures made (a metric)
        self._keys: list[ZoneKey] = []
        self._version: tuple = ()
        self._cache: dict[tuple, dns.rrset.RRset] = {}
        self._signers: dict[int, RrsetSigner] = {}
        self._epoch: tuple = ()
        self._next_check = 0.0
        self.state = KeyState((), (), (), ())
        self.dnskeys = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.DNSKEY)
        self.cds = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.CDS)
        self.cdnskey = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.CDNSKEY)
        self._refresh(clock())
        if not self.state.zone_signers or not self.state.key_signers:
            raise NoKeys(f"no DNSSEC key of {self.zone} in {directory} can sign now "
                         "(create one: director dnssec keygen)")

    def epoch(self) -> tuple:
        """Changes exactly when signed answers made before would differ now."""
        now = self.clock()
        if now >= self._next_check:
            self._refresh(now)
        return self._epoch

    def sign(self, rrset: dns.rrset.RRset) -> dns.rrset.RRset | None:
        """The RRSIGs covering ``rrset`` (None when no key signs it)."""
        key = (rrset.name, rrset.rdtype, rrset.ttl, frozenset(rrset))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        signers = (self.state.key_signers if rrset.rdtype in KEY_TYPES
                   else self.state.zone_signers)
        if not signers:
            return None
        sigs = dns.rrset.RRset(rrset.name, dns.rdataclass.IN, dns.rdatatype.RRSIG,
                               rrset.rdtype)
        inception, expiration = self.signature_times()
        for signer in signers:
            sigs.add(self._signers[signer.tag].sign(rrset, inception, expiration), rrset.ttl)
            self.signed += 1
        if len(self._cache) >= MAX_CACHED:
            for old in list(islice(self._cache, MAX_CACHED // 4)):
                del self._cache[old]
        self._cache[key] = sigs
        return sigs

    def metrics(self) -> dict[str, float]:
        """``DnsStats.dnssec``'s values for this signer."""
        return {"signatures": self.signed, "expiration": self.signature_times()[1]}

    def signature_times(self) -> tuple[int, int]:
        """(inception, expiration) of this window's signatures."""
        start = self._epoch[0] * self.window
        return int(start - SKEW), int(start + self.validity)

    def rrsig_rdatas(self, owner: bytes, labels: int, rdtype: int, ttl: int,
                     rdatas: list[bytes]) -> list[bytes]:
        """The wire RDATA of each zone signer's RRSIG over ``rdatas`` (not cached: for
        answers made once per name, such as a compact denial written by hand)."""
        inception, expiration = self.signature_times()
        made = [self._signers[k.tag].rrsig_rdata(owner, labels, rdtype, ttl, rdatas,
                                                 inception, expiration)
                for k in self.state.zone_signers]
        self.signed += len(made)
        return made

    def sign_response(self, response: dns.message.Message) -> None:
        """Add the RRSIGs of every RRset in ``response``'s three sections."""
        add_rrsigs(response, self.sign)

    def _refresh(self, now: float) -> None:
        version = directory_version(self.directory, self.zone)
        if version != self._version:
            keys = load_keys(self.directory, self.zone)
            if keys or not self._keys:  # an emptied directory keeps the last good keys
                self._keys = keys
            self._version = version
        state = state_at(self._keys, now)
        epoch = (int(now // self.window), tuple(k.tag for k in state.published),
                 tuple(k.tag for k in state.zone_signers),
                 tuple(k.tag for k in state.key_signers),
                 tuple(k.tag for k in state.for_parent))
        if epoch != self._epoch:
            if self._epoch and epoch[1:] != self._epoch[1:]:
                log.info("DNSSEC %s: published %s, signing %s/%s, for the parent %s",
                         self.zone, *epoch[1:])
            self._epoch = epoch
            self.state = state
            self._signers = {k.tag: RrsetSigner(k, self.apex) for k in state.published}
            self._cache = {}
            self._build_key_rrsets(state)
        later = next_change(self._keys, now)
        window_end = (epoch[0] + 1) * self.window
        self._next_check = min(now + self.poll, window_end,
                               later if later is not None else window_end)

    def _build_key_rrsets(self, state: KeyState) -> None:
        ttl = self.dnskey_ttl
        self.dnskeys = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.DNSKEY)
        self.cds = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.CDS)
        self.cdnskey = dns.rrset.RRset(self.apex, dns.rdataclass.IN, dns.rdatatype.CDNSKEY)
        for key in state.published:
            self.dnskeys.add(key.dnskey, ttl)
        for key in state.for_parent:
            self.cds.add(dns.dnssec.make_cds(self.apex, key.dnskey, "SHA256"), ttl)
            self.cdnskey.add(dns.dnssec.make_cdnskey(key.private_key.public_key(), key.algorithm,
                                                   key.dnskey.flags), ttl)
