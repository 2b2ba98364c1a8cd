"""Every console the CLI prints user text on leaves that text alone (no emoji, no colours)."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest

from director.console import plain_console

DIRECTOR = Path(__file__).resolve().parents[2] / "director"


@pytest.mark.parametrize("text", ["C-spill-leak.dp:100:23: error", "x.dp:1234:5: error",
                                  "answer 127.0.2.1 :smile: :thumbs_up:"])
def test_plain_console_prints_text_as_given(text: str) -> None:
    buffer = io.StringIO()
    console = plain_console(file=buffer, width=200)
    console.print(text)
    console.print(text, markup=False)
    assert buffer.getvalue() == f"{text}\n{text}\n"


def test_no_module_makes_a_console_of_its_own() -> None:
    """A bare ``Console(...)`` would bring back rich's emoji and highlighting defaults."""
    found = []
    for path in DIRECTOR.rglob("*.py"):
        if path.name == "console.py" and path.parent == DIRECTOR:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Console":
                found.append(f"{path.relative_to(DIRECTOR)}:{node.lineno}")
    assert found == []
