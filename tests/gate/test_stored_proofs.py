"""Engine proofs stored with the policy (``Acceptance.proofs``, ``director.proof_digest``): a
reader running the same code adopts them without running the decisions again; any other
digest, a malformed list, or a policy the static half refuses still gets the full gate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from director import policy_gate, proof_digest
from director.proof_digest import canonical
from policies import read_sources
from policies.loader import UNSAFE_SKIP_PROOF_ENV
from state import PolicyRecord, StateStore
from tests.gate.gate_helpers import engine_proof_runs, leaking_engine_proof

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "examples" / "global.dp"
CHAT_SHARE = "        max 30%  #"  # the share of a hot region's clients that spills
DIGESTS_SCRIPT = """
from director import policy_gate
a = policy_gate.accept('policies/examples/global.dp')
print(' '.join(a.proofs))
"""


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Services whose engine proof actually ran (a fresh memo: the spy is a new function)."""
    return engine_proof_runs(monkeypatch)


def _sources(share: str = "30"):
    sources = read_sources(str(EXAMPLE))
    assert CHAT_SHARE in sources.text
    text = sources.text.replace(CHAT_SHARE, f"        max {share}%  #")
    return text, sources.name, dict(sources.files)


def test_an_accepted_policy_names_one_proof_per_service_with_residency(
        runs: list[tuple[str, ...]]) -> None:
    text, name, files = _sources()
    acceptance = policy_gate.accept_text(text, name, files)
    assert acceptance.ok and acceptance.policy is not None
    ruled = [s for s in acceptance.policy.services if s.residency]
    assert len(acceptance.proofs) == len(ruled) == len(set(acceptance.proofs)) == 3
    assert sorted(runs) == sorted((s.name,) for s in ruled)


def test_a_reader_with_the_writers_digests_runs_no_decision(runs: list[tuple[str, ...]]) -> None:
    text, name, files = _sources("21")
    writer = policy_gate.accept_text(text, name, files)
    runs.clear()
    policy_gate._PROOFS.clear()  # a reader in another process remembers nothing
    reader = policy_gate.accept_text(text, name, files, proven=writer.proofs)
    assert reader.ok and reader.policy == writer.policy
    assert runs == []
    assert reader.engine is not None and reader.engine.decisions == 0
    assert all(s.attested for s in reader.engine.services)
    assert reader.engine.summary() == "all 3 services proven by the policy's writer"
    assert reader.proofs == writer.proofs  # and it can pass them on


def test_only_the_edited_service_runs_when_the_digests_are_of_the_old_policy(
        runs: list[tuple[str, ...]]) -> None:
    old = policy_gate.accept_text(*_sources("22"))
    runs.clear()
    policy_gate._PROOFS.clear()
    new = policy_gate.accept_text(*_sources("23"), proven=old.proofs)
    assert new.ok and runs == [("chat.infer.example.com",)]
    assert new.engine is not None
    assert [(s.service,) for s in new.engine.services if not s.attested] == runs
    assert "2 proven by the policy's writer" in new.engine.summary()


def test_digests_from_other_code_are_not_trusted(runs: list[tuple[str, ...]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text, name, files = _sources("24")
    written = policy_gate.accept_text(text, name, files).proofs
    runs.clear()
    policy_gate._PROOFS.clear()
    monkeypatch.setattr(proof_digest, "source_fingerprint", lambda: "another version")
    reader = policy_gate.accept_text(text, name, files, proven=written)
    assert reader.ok and len(runs) == 3
    assert reader.proofs and set(reader.proofs).isdisjoint(written)


def test_a_leak_found_by_the_reader_still_refuses_what_the_writer_did_not_prove(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text, name, files = _sources("25")
    writer = policy_gate.accept_text(text, name, files)
    edited = text.replace("ttl 5s", "ttl 6s", 1) + "\n"
    monkeypatch.setattr(policy_gate, "run_engine_proof", leaking_engine_proof)
    # the writer's digests cover every service: the leaking engine is never asked
    assert policy_gate.accept_text(edited, name, files, proven=writer.proofs).ok
    # none of them: the reader runs it, finds the leak, refuses, and passes on no proofs
    refused = policy_gate.accept_text(edited, name, files, proven=["0" * 64])
    assert not refused.ok and refused.proofs == ()
    assert "residency violated by the engine" in refused.error().render()


def test_stored_digests_never_let_a_policy_the_static_proof_refuses_load() -> None:
    leaky = ROOT / "tests" / "policies" / "corpus" / "leak-spillover-eu-to-us-east.dp"
    acceptance = policy_gate.accept_text(leaky.read_text(encoding="utf-8"), "leaky.dp",
                                         proven=["0" * 64])
    assert acceptance.policy is None and acceptance.proofs == ()
    assert "outside the allowed regions" in acceptance.error().render()


def test_the_proof_disabled_switch_stores_no_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSAFE_SKIP_PROOF_ENV, "1")
    acceptance = policy_gate.accept(str(EXAMPLE))
    assert acceptance.ok and acceptance.engine is None and acceptance.proofs == ()


def test_digests_are_the_same_in_every_process_whatever_its_hash_seed() -> None:
    found = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", DIGESTS_SCRIPT], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True, timeout=120)
        found.add(out.stdout.strip())
    assert len(found) == 1 and len(found.pop().split()) == 3


def test_code_whose_sources_cannot_be_read_shares_no_digest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Zipped:
        __file__ = None

    monkeypatch.setattr(proof_digest.importlib, "import_module", lambda _name: Zipped)
    proof_digest.source_fingerprint.cache_clear()
    try:
        first = proof_digest.source_fingerprint()
        proof_digest.source_fingerprint.cache_clear()
        assert first.startswith("unshared") and proof_digest.source_fingerprint() != first
    finally:
        proof_digest.source_fingerprint.cache_clear()


def test_canonical_tells_apart_what_equality_does() -> None:
    assert canonical(frozenset({"b", "a"})) == canonical(frozenset({"a", "b"}))
    assert canonical(1.0) != canonical(1)
    assert canonical(("a",)) != canonical(frozenset({"a"}))
    assert canonical({"x": 1.5}) == canonical({"x": 1.5})


def test_the_record_carries_the_digests_and_reads_a_malformed_list_as_none(
        store: StateStore) -> None:
    text, name, files = _sources()
    proofs = policy_gate.accept_text(text, name, files).proofs
    store.set_policy(text, name=name, files=files, proofs=proofs)
    record = store.policy()
    assert record is not None and record.proofs == proofs
    assert policy_gate.load_record(record) == policy_gate.load_text(text, name, files)
    for garbage in ("not json", '{"a": 1}', "[1, 2]"):
        fields = {**record.fields(), "version": "3", "proofs": garbage}
        assert PolicyRecord.from_fields(fields).proofs == ()
