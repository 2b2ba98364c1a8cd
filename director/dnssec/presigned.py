"""A keyless edge's signer: RRSIGs made by the control plane, read from the shared state.

The edge holds no private key. ``director dnssec presign`` (``presign``) signs every RRset
the zone can answer (``variants``) and publishes the signatures in Redis; each DNS worker
reads them on a thread of its own (``start``) and answers from them. An answer whose RRset
was not signed ahead of time (a rare combination of regions or endpoints) is answered
SERVFAIL, so a validating resolver asks another server, never trusts a bogus answer, and
the RRset is reported to the signer, which signs it in its next round (after checking it
is one the zone can answer). Denial is a classic NSEC chain over the zone's names.

Same interface the handler uses as ``ZoneSigner``: ``epoch()``, ``sign``,
``sign_response``, ``dnskeys``, ``cds``, ``cdnskey``, ``compact``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from director.dns.zone import ZoneData
from director.dnssec.signer import add_rrsigs
from director.dnssec.variants import nsec_chain, rrset_id

log = logging.getLogger(__name__)

MAX_MISSES_PER_ROUND = 1000


def state_client(url: str, timeout: float = 5.0) -> Any:
    """A text client of the shared state at ``url`` (a Sentinel set too), logged in with
    the environment's credentials (``state.credentials``)."""
    from state.credentials import client_options
    from state.sentinel_url import client_for

    return client_for(url, timeout, decode_responses=True, **client_options(url))


def current_key(prefix: str) -> str:
    return f"{prefix}:dnssec:current"


def signed_key(prefix: str, generation: str) -> str:
    return f"{prefix}:dnssec:signed:{generation}"


def misses_key(prefix: str) -> str:
    return f"{prefix}:dnssec:misses"


class PresignedSigner:
    """Signatures of one zone from the shared state; ``load`` swaps in a generation."""

    compact = False

    def __init__(self, zone: ZoneData) -> None:
        self.zone = zone
        self.apex = zone.apex
        self.chain = nsec_chain(zone)
        self.signatures: dict[str, dns.rrset.RRset] = {}
        self.generation = ""
        self.missed: set[str] = set()  # RRsets to report (their text)
        self.misses = 0  # a metric
        self.expiration = 0  # the earliest expiration of the loaded signatures
        self._epoch: tuple = ("", )
        empty = (self.apex, dns.rdataclass.IN)
        self.dnskeys = dns.rrset.RRset(*empty, dns.rdatatype.DNSKEY)
        self.cds = dns.rrset.RRset(*empty, dns.rdatatype.CDS)
        self.cdnskey = dns.rrset.RRset(*empty, dns.rdatatype.CDNSKEY)

    @property
    def ready(self) -> bool:
        return bool(self.generation)

    def metrics(self) -> dict[str, float]:
        """``DnsStats.dnssec``'s values for this edge."""
        values: dict[str, float] = {"presigned_misses": self.misses}
        if self.generation.isdigit():  # published as milliseconds since the epoch
            values["presigned_generation"] = int(self.generation) / 1000
        if self.expiration:
            values["expiration"] = self.expiration
        return values

    def epoch(self) -> tuple:
        return self._epoch

    def load(self, meta: dict[str, Any], signatures: dict[str, str]) -> None:
        """Swap in a generation: ``meta`` (the JSON of ``current_key``) and its hash."""
        parsed: dict[str, dns.rrset.RRset] = {}
        for rid, text in signatures.items():
            name, ttl = rid.split(" ", 2)[:2]
            parsed[rid] = dns.rrset.from_text_list(name, int(ttl), "IN", "RRSIG",
                                                   text.split("\n"))
        keys = {kind: dns.rrset.from_text_list(self.apex, int(meta["ttl"]), "IN", kind,
                                               meta[kind.lower()])
                for kind in ("DNSKEY", "CDS", "CDNSKEY")}
        expirations = [rd.expiration for sigs in parsed.values() for rd in sigs]
        # the epoch last: a reader that sees it sees the rest
        self.expiration = min(expirations, default=0)
        self.signatures = parsed
        self.dnskeys, self.cds, self.cdnskey = keys["DNSKEY"], keys["CDS"], keys["CDNSKEY"]
        self.generation = str(meta["generation"])
        self._epoch = (self.generation,)

    def sign(self, rrset: dns.rrset.RRset) -> dns.rrset.RRset | None:
        found = self.signatures.get(rrset_id(rrset))
        if found is None:
            self.misses += 1
            if len(self.missed) < MAX_MISSES_PER_ROUND:
                self.missed.add(rrset.to_text())
        return found

    def sign_response(self, response: dns.message.Message) -> None:
        """Add the RRSIGs of every RRset; ``Unsigned`` when one has none."""
        add_rrsigs(response, self.sign)


class PresignedFollower:
    """Keeps a ``PresignedSigner`` on the latest generation in Redis (a daemon thread),
    and reports its misses."""

    def __init__(self, signer: PresignedSigner, redis_url: str, prefix: str,
                 poll: float = 1.0) -> None:
        self.signer = signer
        self.client = state_client(redis_url)
        self.prefix = prefix
        self.poll = poll
        self._stop = threading.Event()

    def load_once(self) -> bool:
        """Read the current generation if it is new; whether the signer has one."""
        raw = self.client.get(current_key(self.prefix))
        if raw is None:
            return self.signer.ready
        meta = json.loads(raw)
        if str(meta["generation"]) != self.signer.generation:
            signatures = self.client.hgetall(signed_key(self.prefix, meta["generation"]))
            if signatures:
                self.signer.load(meta, signatures)
                log.info("DNSSEC: %d pre-signed RRsets of generation %s", len(signatures),
                         meta["generation"])
        missed, self.signer.missed = self.signer.missed, set()
        if missed:
            self.client.sadd(misses_key(self.prefix), *missed)
        return self.signer.ready

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.load_once():
                    return True
            except Exception as exc:  # redis down, a malformed generation
                log.warning("DNSSEC: pre-signed answers not readable yet: %s", exc)
            time.sleep(0.2)
        return False

    def start(self) -> None:
        threading.Thread(target=self._run, name="dnssec-presigned", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.load_once()
            except Exception:
                log.exception("DNSSEC: reading pre-signed answers failed; keeping the last")
        self.client.close()  # a follower replaced by a policy swap leaves no connection
