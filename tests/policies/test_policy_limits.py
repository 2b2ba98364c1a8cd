"""Checking a policy is bounded work: includes spliced once per file and block, each file
read once, the policy's size capped with errors that say where, and a deadline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from policies import check_policy
from policies.deadline import Deadline
from policies.loader import memory_reader
from policies.model import SourcePos
from policies.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = (ROOT / "policies" / "examples" / "minimal.dp").read_text(encoding="utf-8")
DAG_DEPTH = 30


def _dag(depth: int) -> dict[str, str]:
    """A policy whose includes form a chain of ``depth`` files, each including the next
    twice: 2**depth paths to the last file, which declares a tenant."""
    files = {"policy.dp": MINIMAL + '\ninclude "f0.dp"\n'}
    for i in range(depth):
        files[f"f{i}.dp"] = f'include "f{i + 1}.dp"\ninclude "f{i + 1}.dp"\n'
    files[f"f{depth}.dp"] = "tenant leaf { weight 2 }\n"
    return files


def _check(files: dict[str, str], name: str = "policy.dp", **kwargs):
    return check_policy(name, reader=memory_reader(files), prove=False, **kwargs)


def _rendered(result) -> str:
    return result.error().render()


def test_a_dag_of_includes_thirty_deep_loads_at_once() -> None:
    files = _dag(DAG_DEPTH)
    assert sum(len(text) for text in files.values()) < 2000  # a few hundred bytes of includes
    # In a child process with a timeout, so that expanding it once per path (2**30 times)
    # fails the test instead of hanging it.
    script = (
        "import json, sys\n"
        "from policies import check_policy\n"
        "from policies.loader import memory_reader\n"
        "files = json.loads(sys.stdin.read())\n"
        "result = check_policy('policy.dp', reader=memory_reader(files), prove=False)\n"
        "print(json.dumps([result.ok, [t.name for t in result.policy.tenants]]))\n")
    try:
        done = subprocess.run([sys.executable, "-c", script], input=json.dumps(files),
                              capture_output=True, text=True, timeout=30, cwd=ROOT,
                              check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a {DAG_DEPTH}-deep DAG of includes did not load within 30 s")
    assert json.loads(done.stdout) == [True, ["leaf"]]  # spliced once: no duplicate tenant


def test_each_file_is_read_and_parsed_once_however_often_it_is_included(monkeypatch) -> None:
    files = _dag(6)
    reads: list[str] = []
    parses: list[str] = []
    read = memory_reader(files)

    def counting(path: str) -> str:
        reads.append(path)
        return read(path)

    def parse(text: str, name: str):
        parses.append(name)
        return parse_text(text, name)

    monkeypatch.setattr("policies.loader.parse_text", parse)
    result = check_policy("policy.dp", reader=counting, prove=False)
    assert result.ok, _rendered(result)
    assert sorted(reads) == sorted(parses) == sorted(files)


def test_a_file_included_in_two_regions_is_spliced_into_each() -> None:
    text = MINIMAL.replace("    capacity 100rps\n", '    include "capacity.dp"\n')
    result = _check({"policy.dp": text, "capacity.dp": "capacity 7rps\n"})
    assert result.ok, _rendered(result)
    assert [r.capacity.rps for r in result.policy.regions] == [7.0, 7.0]


def test_a_file_included_twice_in_one_block_is_spliced_once() -> None:
    text = MINIMAL.replace("    capacity 100rps\n",
                           '    include "capacity.dp"\n    include "again.dp"\n', 1)
    files = {"policy.dp": text, "capacity.dp": "capacity 7rps\n",
             "again.dp": 'include "capacity.dp"\n'}
    result = _check(files)
    assert result.ok, _rendered(result)  # not "'capacity' is set twice"
    assert result.policy.regions[0].capacity.rps == 7.0


def test_a_cycle_inside_a_dag_is_still_an_error() -> None:
    files = _dag(4)
    files["f4.dp"] = 'include "f1.dp"\n'
    result = _check(files)
    assert not result.ok
    assert _rendered(result).startswith("f4.dp:1:9: error: 'f1.dp' includes itself")
    assert "policy.dp -> f0.dp -> f1.dp -> f2.dp -> f3.dp -> f4.dp -> f1.dp" in _rendered(result)


def _regions(count: int) -> str:
    return "".join(
        f"region r{i} {{ location 0 0; jurisdiction US; endpoints 127.0.1.1; "
        f"capacity 1rps }}\n" for i in range(count))


def test_more_regions_than_the_cap_is_an_error_at_the_first_one_over() -> None:
    from policies.limits import MAX_REGIONS

    head = "zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }\n"
    text = head + _regions(MAX_REGIONS + 3) + "service a.infer.example.com { steer geo; " \
        "all-down answer-nothing }\n"
    result = _check({"policy.dp": text})
    assert not result.ok
    line = 2 + MAX_REGIONS
    assert _rendered(result).startswith(
        f"policy.dp:{line}:1: error: the policy declares more than {MAX_REGIONS} regions")


def test_more_services_than_the_cap_is_an_error_at_the_first_one_over() -> None:
    from policies.limits import MAX_SERVICES

    services = "".join(f"service s{i}.infer.example.com {{ steer geo; all-down "
                       f"answer-nothing }}\n" for i in range(MAX_SERVICES + 1))
    result = _check({"policy.dp": MINIMAL + services})
    assert not result.ok
    line = MINIMAL.count("\n") + MAX_SERVICES  # the example declares one already
    assert f"policy.dp:{line}:1: error: the policy declares more than {MAX_SERVICES} " \
           "services" in _rendered(result)


def test_more_directives_than_the_budget_is_an_error_where_it_ran_out(monkeypatch) -> None:
    monkeypatch.setattr("policies.includes.MAX_DIRECTIVES", 60)
    # 20 directives in a file spliced into each of the two regions, and the regions'
    # own: the second splice crosses 60
    gpus = "".join(f"gpu g{i} {{ url http://127.0.0.1:{8000 + i}; models m }}\n"
                   for i in range(7))
    text = MINIMAL.replace("    capacity 100rps\n", '    capacity 100rps\n    include "g.dp"\n')
    result = _check({"policy.dp": text, "g.dp": gpus})
    assert not result.ok
    assert "error: the policy has more than 60 directives" in _rendered(result)
    first = result.diagnostics[0]
    assert first.pos.file == "g.dp" and first.pos.col == 1


def test_more_gpu_servers_than_the_cap_is_an_error_at_the_first_one_over(monkeypatch) -> None:
    monkeypatch.setattr("policies.compiler.MAX_GPUS", 1)
    result = _check({"policy.dp": MINIMAL})
    assert not result.ok
    line = MINIMAL.splitlines().index(
        "    gpu euw1-a { url http://127.0.2.11:8000; models llama-3.1-8b-instruct }") + 1
    assert _rendered(result).startswith(
        f"policy.dp:{line}:5: error: the policy declares more than 1 GPU servers")


def test_more_tenants_than_the_cap_is_an_error_at_the_first_one_over(monkeypatch) -> None:
    monkeypatch.setattr("policies.compiler.MAX_TENANTS", 2)
    tenants = "tenant a {}\ntenant b {}\ntenant c {}\n"
    result = _check({"policy.dp": MINIMAL + tenants})
    assert not result.ok
    line = MINIMAL.count("\n") + 3
    assert _rendered(result).startswith(
        f"policy.dp:{line}:1: error: the policy declares more than 2 tenants")


def test_problems_past_the_listed_ones_are_counted_not_listed() -> None:
    from policies.limits import MAX_REPORTED

    result = _check({"policy.dp": MINIMAL + "nonsense\n" * (MAX_REPORTED + 50)})
    assert len(result.diagnostics) == MAX_REPORTED + 1
    assert result.diagnostics[-1].message == "... and 50 more problems"


class StepClock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_check_past_its_deadline_is_refused_saying_what_was_under_way() -> None:
    # the clock passes the deadline at its third read: at the second region
    deadline = Deadline(1.5, clock=StepClock(1.0))
    result = _check({"policy.dp": MINIMAL}, deadline=deadline)
    assert not result.ok
    only = result.diagnostics[-1]
    assert only.message == ("checking the policy took longer than its deadline of 1.5 s "
                            "(while reading region eu-west)")
    assert only.pos == SourcePos("policy.dp", MINIMAL.splitlines().index("region eu-west {")
                                 + 1, 1)


def test_a_check_within_its_deadline_is_accepted() -> None:
    result = _check({"policy.dp": MINIMAL}, deadline=Deadline(60.0))
    assert result.ok, _rendered(result)


def test_a_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="above zero"):
        Deadline(0.0)


def test_the_language_reference_states_the_limits() -> None:
    from policies import limits

    doc = (ROOT / "docs" / "policy-language.md").read_text(encoding="utf-8")
    section = doc[doc.index("### Limits"):doc.index("## Residency and its proof")]
    for value in (limits.MAX_DIRECTIVES, limits.MAX_REGIONS, limits.MAX_SERVICES,
                  limits.MAX_GPUS, limits.MAX_TENANTS):
        assert f"| {value:,} |" in section
    assert f"At most {limits.MAX_REPORTED} problems are listed" in section
