"""Residency matching (``policies.matching``): every kind of client location against every
kind of rule, as the language reference's tables say."""

from __future__ import annotations

import pytest

from policies import load_policy_text
from policies.matching import NOWHERE, Place, coverage, place

POLICY = """
zone example.com { ns ns1.example.com 127.0.0.1 }
jurisdiction EU { countries FR DE }
jurisdiction EUROPE { continents EU }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region eu-central { location 50.1 8.7; jurisdiction EU; endpoints 127.0.3.1; capacity 10rps }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region ap-south { location 19.0 72.8; jurisdiction IN; endpoints 127.0.4.1; capacity 10rps }
service countries.example.com {
    residency eu { clients jurisdiction EU; allow eu-west eu-central; all-down answer-allowed }
    unknown-location regions eu-central
    all-down answer-nothing
}
service direct.example.com {
    residency fr { clients country FR; allow eu-west; all-down answer-allowed }
    unknown-location regions eu-west
    all-down answer-nothing
}
service continent.example.com {
    residency europe { clients continent EU; allow eu-central; all-down answer-allowed }
    unknown-location regions eu-central
    all-down answer-nothing
}
service by-jurisdiction.example.com {
    residency europe { clients jurisdiction EUROPE; allow eu-central; all-down answer-allowed }
    unknown-location regions eu-central
    all-down answer-nothing
}
service as-unknown.example.com {
    residency eu { clients jurisdiction EU; allow eu-west eu-central; all-down answer-allowed }
    unknown-location regions eu-central
    partial-location unknown
    all-down answer-nothing
}
service two.example.com {
    residency fr { clients country FR; allow eu-west; all-down answer-allowed }
    residency de { clients country DE; allow eu-central; all-down answer-allowed }
    unknown-location refuse
    all-down answer-nothing
}
"""
ALL = ("eu-west", "eu-central", "us-east", "ap-south")


@pytest.fixture(scope="module")
def policy():
    return load_policy_text(POLICY)


# (place, service, rules held, of which partial, located, allowed)
CASES = {
    # country-based rules
    "country-inside": (place("FR", "EU"), "countries", ("eu",), (), True,
                       ("eu-west", "eu-central")),
    "country-lower-case": (place("fr"), "countries", ("eu",), (), True,
                           ("eu-west", "eu-central")),
    "country-outside": (place("US", "NA"), "countries", (), (), True, None),
    "country-same-continent-outside": (place("GB", "EU"), "countries", (), (), True, None),
    "continent-only-of-its-countries": (place(None, "EU"), "countries", ("eu",), ("eu",), True,
                                        ("eu-west", "eu-central")),
    "continent-only-elsewhere": (place(None, "SA"), "countries", (), (), True, None),
    "unknown-code": (place("ZZ"), "countries", (), (), False, ("eu-central",)),
    "unknown-code-with-continent": (place("XX", "EU"), "countries", ("eu",), ("eu",), True,
                                    ("eu-west", "eu-central")),
    "legacy-eu-code": (place("EU"), "countries", (), (), False, ("eu-central",)),
    "nowhere": (NOWHERE, "countries", (), (), False, ("eu-central",)),
    "represented-inside": (place("CU", "NA", "FR"), "countries", ("eu",), ("eu",), True,
                           ("eu-west", "eu-central")),
    "represented-outside": (place("DE", "EU", "US"), "countries", ("eu",), ("eu",), True,
                            ("eu-west", "eu-central")),
    "direct-country-continent-only": (place(None, "EU"), "direct", ("fr",), ("fr",), True,
                                      ("eu-west",)),
    # continent rules
    "continent-country-on-it": (place("GB", "EU"), "continent", ("europe",), (), True,
                                ("eu-central",)),
    "continent-continent-only": (place(None, "EU"), "continent", ("europe",), (), True,
                                 ("eu-central",)),
    "continent-other-continent": (place(None, "AS"), "continent", (), (), True, None),
    "continent-derived-not-given": (place("DE"), "continent", ("europe",), (), True,
                                    ("eu-central",)),
    "jurisdiction-of-continents": (place(None, "EU"), "by-jurisdiction", ("europe",), (),
                                   True, ("eu-central",)),
    # partial-location unknown
    "partial-as-unknown": (place(None, "EU"), "as-unknown", ("eu",), ("eu",), False,
                           ("eu-central",)),
    "sure-not-partial": (place("FR"), "as-unknown", ("eu",), (), True,
                         ("eu-west", "eu-central")),
    # two rules a continent-only client may fall under: both, intersected (nothing)
    "two-rules-may": (place(None, "EU"), "two", ("fr", "de"), ("fr", "de"), True, ()),
    "two-rules-either-country": (Place(frozenset({"FR", "DE"})), "two", ("fr", "de"),
                                 ("fr", "de"), True, ()),
    "two-rules-one": (place("DE"), "two", ("de",), (), True, ("eu-central",)),
}


@pytest.mark.parametrize(("where", "service", "rules", "partial", "located", "allowed"),
                         CASES.values(), ids=CASES.keys())
def test_coverage(policy, where, service, rules, partial, located, allowed) -> None:
    held = coverage(policy, policy.service(f"{service}.example.com"), where)
    assert tuple(r.name for r in held.rules) == rules
    assert tuple(r.name for r in held.partial) == partial
    assert held.located is located
    assert held.allowed == allowed


def test_a_located_client_under_no_rule_is_only_one_no_rule_could_hold(policy) -> None:
    """Brute force over every country and continent-only place: when the matcher says
    "located, no rule", no country the client may be in is any rule's client."""
    from policies.continents import CONTINENT_OF
    from policies.matching import CONTINENTS, rule_clients

    places = [place(c) for c in CONTINENT_OF] + [place(None, k) for k in CONTINENTS]
    for service in policy.services:
        for where in places:
            held = coverage(policy, service, where)
            if not held.located or held.rules:
                continue
            possible = where.countries | {c for c, k in CONTINENT_OF.items()
                                          if k in where.continents}
            for rule in service.residency:
                clients = rule_clients(policy, rule)
                assert not any(c in clients.countries or CONTINENT_OF[c] in clients.continents
                               for c in possible), (service.name, where, rule.name)


def test_the_place_of_codes() -> None:
    assert place("de") == Place(frozenset({"DE"}))
    assert place("DE", "AS") == Place(frozenset({"DE"}))  # the continent is the country's
    assert place(None, "eu") == Place(continents=frozenset({"EU"}))
    assert place("A1") == NOWHERE and place("T1") == NOWHERE and place("", "") == NOWHERE
    assert place(None, "XX") == NOWHERE
    assert place("CU", "NA", "US").countries == {"CU", "US"}
    assert place("EU", "EU") == Place(continents=frozenset({"EU"}))
    assert (place("FR") | place(None, "EU")).describe() == "FR or EU (continent only)"
