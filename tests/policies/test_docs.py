"""docs/policy-language.md: its examples are valid and it covers every construct."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from policies.formatter import format_text
from policies.grammar import CONTEXTS
from policies.parser import parse_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy-language.md"
TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = [(m.group(1).strip(), m.group(2))
          for m in re.finditer(r"^```dp([^\n]*)\n(.*?)^```$", TEXT, re.M | re.S)]


def _blocks(kind: str) -> list[str]:
    return [body for info, body in BLOCKS if info == kind]


def test_the_doc_has_examples() -> None:
    assert len(_blocks("policy")) >= 1
    assert len(_blocks("leaky")) == 3
    assert len(_blocks("")) >= 10


@pytest.mark.parametrize("body", _blocks("policy"))
def test_complete_policies_compile_and_prove(body: str) -> None:
    load_policy_text(body, "doc.dp")


@pytest.mark.parametrize("body", _blocks("leaky"))
def test_leaky_policies_are_rejected(body: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(body, "doc.dp")
    assert all(d.message.startswith("residency:") for d in caught.value.diagnostics)


@pytest.mark.parametrize("body", [b for info, b in BLOCKS])
def test_every_example_parses_and_is_formatted(body: str) -> None:
    _tree, problems = parse_text(body, "doc.dp")
    assert not problems
    assert format_text(body, "doc.dp") == body


DIRECTIVES = sorted({(ctx, name) for ctx, table in CONTEXTS.items() for name in table})


@pytest.mark.parametrize(("context", "name"), DIRECTIVES,
                         ids=[f"{c}.{n}" for c, n in DIRECTIVES])
def test_every_directive_is_documented(context: str, name: str) -> None:
    assert f"`{name}`" in TEXT
    if context != "policy":
        assert f"### `{context}`" in TEXT or f"#### `{context}`" in TEXT
