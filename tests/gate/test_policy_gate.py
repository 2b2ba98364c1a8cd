"""One gate for every policy that loads (``director.policy_gate``): both halves of the
residency proof and the lint, on every path, and no path around it."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from director import policy_gate
from policies import read_sources
from policies.loader import UNSAFE_SKIP_PROOF_ENV
from state import AsyncStateStore, EmbeddedValkey, StateStore
from state.policy_follower import PolicyFollower
from tests.gate.gate_helpers import engine_proof_runs, leaking_engine_proof
from workers.policy_source import PolicyFile, StaticPolicy, StoredPolicy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "examples" / "global.dp"
LOADERS = {"check_policy", "load_policy", "load_policy_text", "read_sources"}
CROSSING = """zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries FR DE }
jurisdiction US { countries US }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
service chat.infer.example.com {
    residency eu { clients jurisdiction EU; allow eu-west us-east; all-down answer-allowed }
    unknown-location refuse
    partial-location intersect
    all-down answer-nothing
}
"""


def test_the_example_passes_both_halves() -> None:
    acceptance = policy_gate.accept(str(EXAMPLE))
    assert acceptance.ok and acceptance.policy is not None
    assert acceptance.engine is not None and acceptance.engine.ok
    assert acceptance.warnings == []
    assert acceptance.sources().name == "global.dp"


def test_warnings_load_unless_strict() -> None:
    relaxed = policy_gate.accept_text(CROSSING, "chat.dp")
    assert relaxed.ok and len(relaxed.warnings) == 1
    strict = policy_gate.accept_text(CROSSING, "chat.dp", strict=True)
    assert not strict.ok and strict.policy is None
    assert strict.error().render().startswith("chat.dp:7:59: warning: residency")


def test_an_engine_violation_refuses_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_gate, "run_engine_proof", leaking_engine_proof)
    acceptance = policy_gate.accept(str(EXAMPLE))
    assert acceptance.policy is None and acceptance.result.ok  # the static half passed
    assert "residency violated by the engine" in acceptance.error().render()
    with pytest.raises(Exception, match="residency violated by the engine"):
        policy_gate.load(str(EXAMPLE))


def test_the_test_only_switch_skips_both_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_gate, "run_engine_proof", leaking_engine_proof)
    monkeypatch.setenv(UNSAFE_SKIP_PROOF_ENV, "1")
    acceptance = policy_gate.accept(str(EXAMPLE))
    assert acceptance.ok and acceptance.engine is None


def test_the_policy_follower_runs_the_gate(valkey: EmbeddedValkey, store: StateStore,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sources = read_sources(str(EXAMPLE))
    seen: list[int] = []

    async def scenario() -> None:
        aio = AsyncStateStore.from_url(valkey.url, prefix=store.keys.prefix)
        follower = PolicyFollower(aio, lambda _p, version: seen.append(version),
                                  load=policy_gate.load_record)
        store.set_policy(sources.text, name=sources.name, files=sources.files)
        assert await follower.check() == 1
        monkeypatch.setattr(policy_gate, "run_engine_proof", leaking_engine_proof)
        store.set_policy(sources.text + "\n", name=sources.name, files=sources.files)
        assert await follower.check() is None
        assert follower.rejected == 2 and follower.version == 1
        await aio.close()

    asyncio.run(scenario())
    assert seen == [1]


def test_the_probe_workers_load_through_the_gate(store: StateStore, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sources = read_sources(str(EXAMPLE))
    stored = StoredPolicy(store, StaticPolicy(policy_gate.load_text(CROSSING, "chat.dp")))
    monkeypatch.setattr(policy_gate, "run_engine_proof", leaking_engine_proof)
    assert stored.poll() is not None  # the initial one, given in-process
    store.set_policy(sources.text, name=sources.name, files=sources.files)
    assert stored.poll() is None and stored.rejected == 1
    with pytest.raises(Exception, match="residency violated by the engine"):
        PolicyFile.loaded(EXAMPLE)


def _calls(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in LOADERS:
                found.append((name, node.lineno))
    return found


def test_no_path_loads_a_policy_around_the_gate() -> None:
    """Outside ``policies`` itself, only the gate calls the policy loaders."""
    bypass = []
    for package in ("director", "regions", "workers"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "director" / "policy_gate.py":
                continue
            bypass += [f"{path.relative_to(ROOT)}:{line}: {name}" for name, line in _calls(path)]
    assert bypass == []
    assert _calls(ROOT / "director" / "policy_gate.py")  # the scan sees calls where they are


def test_edits_no_decision_reads_reuse_the_proof_and_a_service_edit_reruns_that_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sources = read_sources(str(EXAMPLE))
    real = policy_gate.run_engine_proof
    runs = engine_proof_runs(monkeypatch)

    def edited(old: str, new: str) -> policy_gate.Policy:
        assert old in sources.text
        return policy_gate.load_text(sources.text.replace(old, new, 1), sources.name,
                                     sources.files)

    base = policy_gate.load_text(sources.text, sources.name, sources.files)
    proved = len(runs)
    ttl = edited("    ttl 5s  #", "    ttl 9s  #")
    address = edited("    endpoints 127.0.2.1\n", "    endpoints 127.0.2.9\n")
    assert ttl.service("chat.infer.example.com").ttl == 9
    assert policy_gate.proof_key(ttl) == policy_gate.proof_key(base)
    assert policy_gate.proof_key(address) == policy_gate.proof_key(base)
    assert len(runs) == proved  # nothing the engine reads changed: no decision ran
    steer = edited("steer latency geo", "steer geo")
    assert policy_gate.proof_key(steer) != policy_gate.proof_key(base)
    assert runs[proved:] == [("chat.infer.example.com",)]
    whole = real(steer)
    assert policy_gate.engine_proof(steer).services == whole.services


def test_a_spillover_threshold_or_failover_edit_reuses_the_proof_and_a_share_edit_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sources = read_sources(str(EXAMPLE))
    runs = engine_proof_runs(monkeypatch)

    def accepted(*edits: tuple[str, str]) -> policy_gate.Acceptance:
        text = sources.text
        for old, new in edits:
            assert old in text
            text = text.replace(old, new, 1)
        acceptance = policy_gate.accept_text(text, sources.name, sources.files)
        assert acceptance.ok
        return acceptance

    base = accepted()
    proved = len(runs)
    moved = accepted(("        at 85%   #", "        at 61.5%   #"),
                     ("        fall 2\n", "        fall 5\n"))
    assert moved.policy is not None
    assert moved.policy.service("chat.infer.example.com").spillover.threshold == 0.615
    assert len(runs) == proved  # the threshold and the hysteresis: no decision ran
    assert moved.proofs == base.proofs  # and a follower finds the stored digests
    share = accepted(("        max 30%  #", "        max 20%  #"))
    assert runs[proved:] == [("chat.infer.example.com",)]
    assert share.proofs != base.proofs
