"""The residency lint: a rule allowing regions outside its clients' jurisdictions warns (with
position and hint), ``cross-border`` silences it exactly, and warnings never block loading."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from director.datasets import data_dir
from policies import check_policy
from policies.continents import CONTINENT_OF
from policies.loader import memory_reader

HEAD = """zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries FR DE IE }
jurisdiction US { countries US }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region ap-south { location 19.0 72.8; jurisdiction IN; endpoints 127.0.4.1; capacity 10rps }
service chat.infer.example.com {
    residency eu {
"""
TAIL = """        all-down answer-allowed
    }
    unknown-location refuse
    partial-location intersect
    all-down answer-nothing
}
"""


def check(rule: str):
    text = HEAD + rule + TAIL
    return check_policy("chat.dp", reader=memory_reader({"chat.dp": text}))


def rendered(result) -> list[str]:
    return [w.render(result.sources) for w in result.warnings]


def test_an_eu_rule_allowing_a_us_region_warns_at_the_region_with_a_hint() -> None:
    result = check("        clients jurisdiction EU\n        allow eu-west us-east\n")
    assert result.ok and result.policy is not None  # a warning never blocks loading
    (text,) = rendered(result)
    assert text == (
        "chat.dp:10:23: warning: residency: service chat.infer.example.com, rule eu: allows "
        "us-east (US), outside the jurisdictions of its clients (EU)\n"
        " 10 |         allow eu-west us-east\n"
        "    |                       ^^^^^^^\n"
        "  = hint: if EU clients may be served there on purpose, say so in the rule: "
        "'cross-border us-east'; otherwise remove it from 'allow'")
    assert result.warnings[0].as_dict()["severity"] == "warning"


@pytest.mark.parametrize(("rule", "warned"), [
    ("clients jurisdiction EU\n allow eu-west", []),
    ("clients jurisdiction EU\n allow jurisdiction EU", []),
    ("clients jurisdiction EU\n allow eu-west us-east ap-south",
     ["us-east (US) and ap-south (IN)"]),
    ("clients country FR\n allow us-east", ["us-east (US)"]),
    ("clients continent EU\n allow eu-west us-east", ["us-east (US)"]),
    ("clients country CH\n allow us-east", []),  # no declared jurisdiction holds CH: not linted
    ("clients jurisdiction EU\n allow eu-west us-east\n cross-border us-east", []),
    ("clients jurisdiction EU\n allow eu-west us-east ap-south\n cross-border us-east",
     ["ap-south (IN)"]),
], ids=["inside", "by-jurisdiction", "two-outside", "by-country", "by-continent",
        "unknown-home", "acknowledged", "half-acknowledged"])
def test_which_rules_warn(rule: str, warned: list[str]) -> None:
    result = check("".join(f"        {line.strip()}\n" for line in rule.split("\n")))
    assert result.ok
    found = [w.message.split("allows ")[1].split(", outside")[0] for w in result.warnings]
    assert found == warned


def test_an_acknowledgement_that_crosses_nothing_is_reported() -> None:
    result = check("        clients jurisdiction EU\n        allow eu-west\n"
                   "        cross-border eu-west us-east\n")
    messages = [w.message for w in result.warnings]
    assert messages == [
        "residency: service chat.infer.example.com, rule eu: 'cross-border eu-west' "
        "acknowledges nothing: eu-west is inside EU",
        "residency: service chat.infer.example.com, rule eu: 'cross-border us-east' "
        "acknowledges nothing: us-east is not in 'allow'"]


def test_cross_border_names_declared_regions() -> None:
    result = check("        clients jurisdiction EU\n        allow eu-west\n"
                   "        cross-border us-est\n")
    assert not result.ok
    assert "unknown region 'us-est'" in result.diagnostics[0].message


def test_the_examples_have_no_warnings(example_policy_path: Path) -> None:
    assert check_policy(str(example_policy_path)).warnings == []


def test_the_continent_table_agrees_with_maxminds_test_data() -> None:
    """Every country and continent pair in MaxMind's test databases is in the table."""
    folder = data_dir() / "geoip" / "maxmind-test"
    pairs = set()
    for path in folder.glob("*-Test.networks.csv"):
        with path.open(encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                if row.get("country_iso_code") and row.get("continent_code"):
                    pairs.add((row["country_iso_code"], row["continent_code"]))
    assert len(pairs) > 20
    assert sorted(p for p in pairs if CONTINENT_OF.get(p[0]) != p[1]) == []
