"""Query sets for ``bench/dns.sh``: dnsperf's TCP-stream binary format (-B).

``ecs-mix``: 30,000 ``chat.infer.example.com A`` queries with EDNS0 and an ECS option, each
from a distinct /24, a third each located (GeoLite2 City 2018) in Europe, the Americas and
Asia/Oceania; RD clear, as a resolver asks an authoritative server. Deterministic (seeded).

``--fresh N --parts K``: N distinct /24s drawn uniformly from the routable IPv4 space (no
database sampling: every network a public resolver may forward), written as K files
``OUT.0`` .. ``OUT.K-1`` of N / K queries each, so each measured round asks subnets no
earlier round asked. Built by splicing each address into one query's bytes. ``--ipv6``:
distinct /56s of global unicast IPv6 (2000::/3) instead.

    python bench/dns_gen_queries.py OUT.bin [--count 30000] [--seed 7]
    python bench/dns_gen_queries.py OUT.bin --fresh 1500000 --parts 3
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import maxminddb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from director.geo import default_database_path

GROUPS = {"EU": "eu", "NA": "americas", "SA": "americas", "AS": "asia", "OC": "asia"}


def sample_subnets(count: int, seed: int) -> list[str]:
    """``count`` distinct /24s, a third per group, found by sampling the database."""
    rng = random.Random(seed)
    reader = maxminddb.open_database(default_database_path())
    per_group = {"eu": [], "americas": [], "asia": []}
    want = count // 3
    seen: set[int] = set()
    while min(len(v) for v in per_group.values()) < want:
        prefix = rng.randrange(1 << 24)
        if prefix in seen or (prefix >> 16) in (0, 10, 127) or (prefix >> 16) >= 224:
            continue
        seen.add(prefix)
        address = f"{prefix >> 16}.{(prefix >> 8) & 255}.{prefix & 255}.0"
        record = reader.get(address)
        continent = ((record or {}).get("continent") or {}).get("code")
        group = GROUPS.get(continent or "")
        if group is not None and len(per_group[group]) < want:
            per_group[group].append(address + "/24")
    out = [s for trio in zip(*per_group.values(), strict=True) for s in trio]
    return out + per_group["eu"][: count - len(out)]


def query_wire(subnet: str, qname: str = "chat.infer.example.com") -> bytes:
    query = dns.message.make_query(qname, "A", use_edns=0, payload=1232,
                                   options=[dns.edns.ECSOption.from_text(subnet)])
    query.flags &= ~dns.flags.RD
    return query.to_wire()


def fresh_subnets(count: int, seed: int) -> list[int]:
    """``count`` distinct /24 network numbers (address >> 8) of routable unicast IPv4."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    while len(chosen) < count:
        prefix = rng.randrange(1 << 16, 224 << 16)
        if (prefix >> 16) not in (10, 127):
            chosen.add(prefix)
    out = list(chosen)
    rng.shuffle(out)
    return out


def fresh_ipv6_subnets(count: int, seed: int) -> list[int]:
    """``count`` distinct /56 network numbers (address >> 72) in 2000::/3."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    while len(chosen) < count:
        chosen.add((0b001 << 53) | rng.getrandbits(53))
    out = list(chosen)
    rng.shuffle(out)
    return out


def write_fresh(out: str, count: int, parts: int, seed: int, ipv6: bool = False) -> None:
    width = 7 if ipv6 else 3  # octets of a /56 or a /24 in the ECS option
    sample = bytes(range(1, width + 1))
    template = query_wire("0102:0304:0506:0700::/56" if ipv6 else "1.2.3.0/24")
    at = len(template) - width  # the option ends with the address's leading octets
    assert template[at:] == sample
    subnets = fresh_ipv6_subnets(count, seed) if ipv6 else fresh_subnets(count, seed)
    size = count // parts
    for part in range(parts):
        with open(f"{out}.{part}", "wb") as handle:
            for prefix in subnets[part * size:(part + 1) * size]:
                wire = template[:at] + prefix.to_bytes(width, "big")
                handle.write(struct.pack("!H", len(wire)) + wire)
    print(f"{parts} x {size} queries from distinct {'/56s' if ipv6 else '/24s'} -> {out}.0 .. "
          f"{out}.{parts - 1}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fresh", type=int, metavar="N",
                        help="N distinct /24s from all of the routable space instead")
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--ipv6", action="store_true", help="with --fresh: /56s of IPv6")
    args = parser.parse_args()
    if args.fresh:
        write_fresh(args.out, args.fresh, args.parts, args.seed, args.ipv6)
        return 0
    subnets = sample_subnets(args.count, args.seed)
    with open(args.out, "wb") as out:
        for subnet in subnets:
            wire = query_wire(subnet)
            out.write(struct.pack("!H", len(wire)) + wire)
    Path(args.out + ".subnets").write_text("\n".join(subnets) + "\n")
    print(f"{len(subnets)} queries from distinct /24s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
