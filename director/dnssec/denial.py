"""Compact denial of existence (RFC 9824): one NSEC record made for the name asked.

A name that does not exist is answered NOERROR with an NSEC at the name whose next name is
``\\000.<name>`` and whose type bitmap holds RRSIG, NSEC and the NXNAME pseudo-type (128):
it covers only the name asked, so nothing of the zone can be walked, and its signature is
made once per name. A name that exists but has no data of the type asked (and an empty
non-terminal) gets the same shape with the name's real types, never the type asked.
"""

from __future__ import annotations

from collections.abc import Iterable

import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.NSEC
import dns.rrset

NXNAME = 128
_ALWAYS = (dns.rdatatype.RRSIG, dns.rdatatype.NSEC)


def _next_name(name: dns.name.Name) -> dns.name.Name:
    """``\\000.<name>``: the immediate successor of ``name`` in canonical order."""
    return dns.name.Name((b"\x00", *name.labels))


def compact_nsec(name: dns.name.Name, ttl: int, types: Iterable[int],
                 asked: int | None = None) -> dns.rrset.RRset:
    """The NSEC for ``name`` listing ``types`` (without ``asked``) plus RRSIG and NSEC."""
    present = sorted({*types, *_ALWAYS} - ({asked} if asked is not None else set()))
    windows = dns.rdtypes.ANY.NSEC.Bitmap.from_rdtypes(
        [dns.rdatatype.RdataType.make(t) for t in present])
    nsec = dns.rdtypes.ANY.NSEC.NSEC(dns.rdataclass.IN, dns.rdatatype.NSEC,
                                     _next_name(name), windows)
    rrset = dns.rrset.RRset(name, dns.rdataclass.IN, dns.rdatatype.NSEC)
    rrset.add(nsec, ttl)
    return rrset


def nxname_nsec(name: dns.name.Name, ttl: int) -> dns.rrset.RRset:
    """The NSEC that says ``name`` does not exist (RFC 9824 section 3.1)."""
    return compact_nsec(name, ttl, (NXNAME,))
