"""Every kind of client identity a balancer may see, against every kind of residency rule,
over real HTTP: the request goes to the region the rule forbids, so it must be refused (451)
whenever the client may be the rule's, served (200) only when it surely is not, and a
header that says nothing valid is refused (400). Client locations come from the real
GeoLite2 database (``director region serve``'s own residency check)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import aiohttp
import pytest
from multidict import CIMultiDict

from director.commands.region import residency_check
from policies import Policy, load_policy_text
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.simulator import Fleet, ServerSpec

HEAD = """
zone example.com { ns ns1.example.com 127.0.0.1 }
jurisdiction EU { countries FR DE }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
service chat.example.com {
    residency r { %s; all-down answer-allowed }
    unknown-location regions %s
    all-down answer-nothing
}
"""
# rule kind -> (the rule, the region it keeps its clients in, the region that must refuse)
RULES = {
    "countries": ("clients jurisdiction EU; allow eu-west", "eu-west", "us-east"),
    "continent": ("clients continent EU; allow eu-west", "eu-west", "us-east"),
    "country": ("clients country FR; allow eu-west", "eu-west", "us-east"),
    "us": ("clients country US; allow us-east", "us-east", "eu-west"),
}
KINDS = tuple(RULES)
C, IP = "X-Director-Client-Country", "X-Director-Client-IP"
FR_IP, EU_ONLY_IP, GB_IP = "2.2.70.1", "2.16.1.1", "81.2.69.142"  # GeoLite2 City 2018
ANONYMOUS_IP, SATELLITE_IP = "31.14.133.39", "5.145.149.142"  # registered IT, US
MILITARY_IP = "4.16.182.1"  # CU, representing US (a base)
REGISTERED_ONLY_IP, PRIVATE_IP = "23.129.65.1", "10.1.2.3"
REFUSE, SERVE, BAD = 451, 200, 400

# header kind -> (headers, expected status per rule kind: countries, continent, country, us)
CASES: dict[str, tuple[list[tuple[str, str]], tuple[int, ...]]] = {
    "country-in-rule": ([(C, "FR")], (REFUSE, REFUSE, REFUSE, SERVE)),
    "country-lower-case": ([(C, "fr")], (REFUSE, REFUSE, REFUSE, SERVE)),
    "country-padded": ([(C, " FR ")], (REFUSE, REFUSE, REFUSE, SERVE)),
    "country-jurisdiction-only": ([(C, "DE")], (REFUSE, REFUSE, SERVE, SERVE)),
    "country-on-the-continent": ([(C, "GB")], (SERVE, REFUSE, SERVE, SERVE)),
    "country-elsewhere": ([(C, "US")], (SERVE, SERVE, SERVE, REFUSE)),
    "edge-unknown-xx": ([(C, "XX")], (REFUSE,) * 4),
    "edge-tor-t1": ([(C, "T1")], (REFUSE,) * 4),
    "legacy-eu-code": ([(C, "EU")], (REFUSE,) * 4),
    "country-name": ([(C, "France")], (BAD,) * 4),
    "country-empty": ([(C, "")], (BAD,) * 4),
    "country-twice": ([(C, "US"), (C, "FR")], (BAD,) * 4),
    "ip-in-rule": ([(IP, FR_IP)], (REFUSE, REFUSE, REFUSE, SERVE)),
    "ip-continent-only": ([(IP, EU_ONLY_IP)], (REFUSE, REFUSE, REFUSE, SERVE)),
    "ip-on-the-continent": ([(IP, GB_IP)], (SERVE, REFUSE, SERVE, SERVE)),
    "ip-anonymous-proxy": ([(IP, ANONYMOUS_IP)], (REFUSE,) * 4),
    "ip-satellite": ([(IP, SATELLITE_IP)], (REFUSE,) * 4),
    "ip-represented-country": ([(IP, MILITARY_IP)], (SERVE, SERVE, SERVE, REFUSE)),
    "ip-registered-only": ([(IP, REGISTERED_ONLY_IP)], (REFUSE,) * 4),
    "ip-no-record": ([(IP, PRIVATE_IP)], (REFUSE,) * 4),
    "ip-garbage": ([(IP, "not-an-address")], (BAD,) * 4),
    "ip-list": ([(IP, f"{FR_IP}, 8.8.8.8")], (BAD,) * 4),
    "ip-twice": ([(IP, "8.8.8.8"), (IP, FR_IP)], (BAD,) * 4),
    "both-headers-either-place": ([(C, "US"), (IP, FR_IP)], (REFUSE,) * 4),
    "no-header-loopback-peer": ([], (REFUSE,) * 4),
}


@pytest.fixture(scope="module")
def policies() -> dict[str, Policy]:
    return {kind: load_policy_text(HEAD % (rule, home))
            for kind, (rule, home, _) in RULES.items()}


async def test_header_kind_by_rule_kind(policies) -> None:
    """One balancer per rule kind in the region it forbids; every header kind sent to each:
    the whole table must be as expected (a mismatch names its cells)."""
    body = {"model": "sim-model", "prompt": "hi", "max_tokens": 1}
    got: dict[str, tuple[int, ...]] = {}
    async with Fleet([ServerSpec("gpu0")], time_scale=50) as fleet, AsyncExitStack() as stack:
        spec = BackendSpec("gpu0", fleet["gpu0"].url, ("sim-model",))
        balancers = {}
        for kind, (_, _, forbidden) in RULES.items():
            check = residency_check(policies[kind], forbidden, None, ["127.0.0.0/8"])
            balancers[kind] = await stack.enter_async_context(
                build_balancer(forbidden, [spec], BalancerConfig(residency=check)))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for case, (headers, _) in CASES.items():
            statuses = []
            for kind in KINDS:
                sent = CIMultiDict([("Host", "chat.example.com"), *headers])
                async with session.post(f"{balancers[kind].url}/v1/completions", json=body,
                                        headers=sent) as response:
                    await response.read()
                    statuses.append(response.status)
            got[case] = tuple(statuses)
    wrong = {f"{case} x {kind}": (got[case][i], expected[i])
             for case, (_, expected) in CASES.items() for i, kind in enumerate(KINDS)
             if got[case][i] != expected[i]}
    assert not wrong, f"{len(wrong)} cells (got, expected): {wrong}"
