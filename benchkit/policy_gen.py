"""Generate a large, valid policy: many regions in several jurisdictions, many GPU servers
each, many services with EU and IN residency rules. Used by ``bench/policy_check.py`` and
its test; nothing here measures anything. ``bench/policy_gen.py`` writes one to stdout.
"""

from __future__ import annotations

import random

# (jurisdiction, countries it declares, a box of locations its regions are placed in)
JURISDICTIONS = (
    ("EU", "AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE",
     (36.0, 60.0, -9.0, 25.0)),
    ("US", "US PR GU VI", (26.0, 47.0, -122.0, -71.0)),
    ("IN", "IN", (9.0, 28.0, 72.0, 88.0)),
    ("JP", "JP", (31.0, 43.0, 130.0, 141.0)),
    ("BR", "BR", (-30.0, -3.0, -60.0, -35.0)),
)
SHARES = {"EU": 0.3, "US": 0.3, "IN": 0.1, "JP": 0.15, "BR": 0.15}
MODELS = ("llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "bge-large-en")


def generate(regions: int = 50, gpus: int = 100, services: int = 20, seed: int = 1) -> str:
    """The policy text: ``regions`` regions with ``gpus`` GPU servers each and ``services``
    services, every one with an EU and an IN residency rule."""
    rng = random.Random(seed)
    lines = ["zone infer.example.com {", "    ttl 30s",
             "    ns ns1.infer.example.com 127.0.0.1", "}", ""]
    for name, countries, _box in JURISDICTIONS:
        lines.append(f"jurisdiction {name} {{ countries {countries} }}")
    lines.append("")
    placed: dict[str, list[str]] = {name: [] for name, *_ in JURISDICTIONS}
    for index in range(regions):
        jurisdiction, _countries, (lat0, lat1, lon0, lon1) = _pick(index, regions)
        name = f"{jurisdiction.lower()}-{len(placed[jurisdiction]) + 1}"
        placed[jurisdiction].append(name)
        a, b = divmod(index + 1, 250)
        lines += [f"region {name} {{",
                  f"    location {rng.uniform(lat0, lat1):.2f} {rng.uniform(lon0, lon1):.2f}",
                  f"    jurisdiction {jurisdiction}",
                  f"    endpoints 127.{a}.{b}.1",
                  f"    capacity {gpus} gpus x 6rps"]
        for gpu in range(gpus):
            models = " ".join(rng.sample(MODELS, rng.randint(1, 2)))
            lines.append(f"    gpu {name}-g{gpu} {{ url http://10.{index}.{gpu // 250}."
                         f"{gpu % 250}:8000; models {models} }}")
        lines += ["}", ""]
    eu, india = placed["EU"], placed["IN"]
    if not eu or not india:
        raise ValueError("needs at least one EU and one IN region (use --regions >= 10)")
    for index in range(services):
        steer = rng.choice(("latency geo", "geo", "weighted", "latency"))
        spill = rng.choice((True, False))
        lines += [f"service svc{index}.infer.example.com {{",
                  f"    steer {steer}",
                  "    ttl 20s"]
        if spill:
            lines.append("    spillover { at 85%; max 30% }")
        lines += ["    residency eu-gdpr {",
                  "        clients jurisdiction EU",
                  "        allow jurisdiction EU",
                  "        all-down answer-allowed",
                  "    }",
                  "    residency india {",
                  "        clients jurisdiction IN",
                  "        allow " + " ".join(india),
                  "        all-down answer-nothing",
                  "    }",
                  "    unknown-location refuse",
                  "    all-down answer-nothing",
                  "}", ""]
    return "\n".join(lines)


def _pick(index: int, total: int) -> tuple[str, str, tuple[float, float, float, float]]:
    """Jurisdictions in proportion to ``SHARES``, deterministic by index."""
    position = (index + 0.5) / total
    edge = 0.0
    for name, countries, box in JURISDICTIONS:
        edge += SHARES[name]
        if position < edge:
            return name, countries, box
    name, countries, box = JURISDICTIONS[-1]
    return name, countries, box
