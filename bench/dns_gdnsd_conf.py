"""A gdnsd 3 configuration with the example policy's zone, regions and GeoLite2 database.

Zone ``infer.example.com`` (SOA, NS, glue) and the three services as ``DYNA geoip!<name>``
over datacenters us-east, eu-west, eu-central, ap-south with the policy's endpoints; the map:
EU-continent countries to eu-central or eu-west (nearest first, as the policy's geo steering),
the Americas to us-east, Asia and Oceania to ap-south, Africa to eu-west. ECS is on (gdnsd's
default), and gdnsd merges GeoIP networks that map alike (its ECS scopes are those supernets).

    python bench/dns_gdnsd_conf.py OUTDIR --port 5301
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from director.geo import default_database_path
from policies import load_policy

ROOT = Path(__file__).resolve().parents[1]
WEST = ("IE", "GB", "PT", "IS")  # nearer Dublin than Frankfurt


def write_config(out: Path, port: int, policy_path: Path) -> None:
    policy = load_policy(str(policy_path))
    (out / "zones").mkdir(parents=True, exist_ok=True)
    (out / "geoip").mkdir(exist_ok=True)
    mmdb = out / "geoip" / "GeoLite2-City.mmdb"
    if not mmdb.exists():
        os.symlink(default_database_path(), mmdb)
    eu_countries = sorted({c for j in policy.jurisdictions if j.name == "EU"
                           for c in j.countries} | set(WEST))
    eu_map = ",\n".join(
        f"          {c} => [{'eu-west, eu-central' if c in WEST else 'eu-central, eu-west'}]"
        for c in eu_countries)
    dcmap = "\n".join(
        f"          {r.name} => {r.endpoints_v4[0]}" for r in policy.regions)
    resources = "\n".join(
        f"      {name} => {{ map => director, dcmap => {{\n{dcmap}\n        }} }}"
        for name in ("chat", "embed", "sovereign"))
    (out / "config").write_text(f"""options => {{
  listen => [ 127.0.0.1:{port} ]
}}
plugins => {{ geoip => {{
  maps => {{
    director => {{
      geoip2_db => GeoLite2-City.mmdb,
      datacenters => [us-east, eu-west, eu-central, ap-south],
      map => {{
        EU => {{
          default => [eu-central, eu-west],
{eu_map}
        }}
        NA => [us-east], SA => [us-east], AN => [us-east],
        AS => [ap-south], OC => [ap-south], AF => [eu-west],
      }}
    }}
  }}
  resources => {{
{resources}
  }}
}}}}
""")
    zone = policy.zone
    ns_lines = "\n".join(f"@ {int(zone.ttl)} NS {ns.name}." for ns in zone.nameservers)
    glue = "\n".join(f"{ns.name}. {int(zone.ttl)} A {a}" for ns in zone.nameservers
                     for a in ns.addresses if ":" not in a)
    soa = zone.soa
    timers = f"{int(soa.refresh)} {int(soa.retry)} {int(soa.expire)} {int(soa.minimum)}"
    (out / "zones" / zone.apex).write_text(f"""$TTL {int(zone.ttl)}
@ SOA {soa.mname}. {soa.rname}. 1 {timers}
{ns_lines}
{glue}
chat 30 DYNA geoip!chat
embed 60 DYNA geoip!embed
sovereign 20 DYNA geoip!sovereign
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--port", type=int, default=5301)
    parser.add_argument("--policy", default=str(ROOT / "policies/examples/global.dp"))
    args = parser.parse_args()
    write_config(Path(args.out), args.port, Path(args.policy))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
