"""Every malformed policy of the corpus reports exactly its golden diagnostics."""

from __future__ import annotations

import pytest
from policy_corpus import CORPUS, case_names, golden_path, render_case

CASES = case_names()


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 45


@pytest.mark.parametrize("name", CASES, ids=CASES)
def test_case_matches_golden(name: str) -> None:
    golden = golden_path(name)
    assert golden.exists(), f"no golden for {name}: run tests/policies/regen_goldens.py"
    assert render_case(name) == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", CASES, ids=CASES)
def test_case_says_what_it_tests(name: str) -> None:
    first = (CORPUS / f"{name}.dp").read_bytes().decode("utf-8", "replace").splitlines()[0]
    assert first.startswith("# ") and len(first) > 10


@pytest.mark.parametrize("name", CASES, ids=CASES)
def test_case_is_rejected(name: str) -> None:
    assert render_case(name) != "ok: no problems found\n"
