"""``director policy fmt``: canonical layout, idempotent, meaning unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from policies.formatter import format_text

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
FILES = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.dp"))


@pytest.mark.parametrize("name", FILES, ids=FILES)
def test_examples_are_already_canonical(name: str) -> None:
    text = (EXAMPLES / name).read_text(encoding="utf-8")
    assert format_text(text, name) == text


@pytest.mark.parametrize("name", FILES, ids=FILES)
def test_fmt_is_idempotent_on_examples(name: str) -> None:
    once = format_text((EXAMPLES / name).read_text(encoding="utf-8"), name)
    assert format_text(once, name) == once


CASES = {
    "indentation": (
        "zone a.example {\n  ns ns1.a.example 127.0.0.1\n}\n",
        "zone a.example {\n    ns ns1.a.example 127.0.0.1\n}\n",
    ),
    "spacing-between-arguments": (
        "region  r   {\n\tlocation   1    2\n}\n",
        "region r {\n    location 1 2\n}\n",
    ),
    "semicolons-split-lines": (
        "state { stale-after 30s }; region r { weight 1; capacity 1rps\n}\n",
        "state { stale-after 30s }\nregion r {\n    weight 1\n    capacity 1rps\n}\n",
    ),
    "one-line-block-stays-on-one-line": (
        "gpu a {url http://x:1;models m}\n",
        "gpu a { url http://x:1; models m }\n",
    ),
    "empty-block": ("state {  }\nsoa {\n}\n", "state {}\nsoa {\n}\n"),
    "blank-lines-collapse": (
        "\n\nzone z {\n\n    ttl 1s\n\n\n    ns n\n\n}\n\n\nregion r {}\n\n",
        "zone z {\n    ttl 1s\n\n    ns n\n}\n\nregion r {}\n",
    ),
    "trailing-comments-align": (
        "s {\n    at 85%  # a\n    max 30%    # b\n}\n",
        "s {\n    at 85%   # a\n    max 30%  # b\n}\n",
    ),
    "comments-keep-their-place": (
        "# head\nzone z { # open\n  # inside\n  ns n\n} # close\n",
        "# head\nzone z {  # open\n    # inside\n    ns n\n}  # close\n",
    ),
    "strings-requoted": (
        'include   "regions/a b.dp"\ninclude "x\\"y"\n',
        'include "regions/a b.dp"\ninclude "x\\"y"\n',
    ),
    "long-one-line-block-expands": (
        "gpu a { url http://127.0.0.1:8000; models " + " ".join(["model-name"] * 8) + " }\n",
        "gpu a {\n    url http://127.0.0.1:8000\n    models " + " ".join(["model-name"] * 8)
        + "\n}\n",
    ),
    "crlf": ("zone z {\r\n    ns n\r\n}\r\n", "zone z {\n    ns n\n}\n"),
    "empty-file": ("", ""),
}


@pytest.mark.parametrize(("source", "expected"), CASES.values(), ids=CASES.keys())
def test_canonical_layout(source: str, expected: str) -> None:
    assert format_text(source) == expected
    assert format_text(expected) == expected


def test_fmt_refuses_syntax_errors() -> None:
    with pytest.raises(PolicyError) as caught:
        format_text("zone z {\n", "broken.dp")
    assert caught.value.diagnostics[0].pos.file == "broken.dp"
    assert "never closed" in caught.value.render()


def test_fmt_keeps_meaning_of_messy_policy() -> None:
    messy = (
        "zone infer.example.com{ns ns1.infer.example.com 127.0.0.1}\n"
        "region us-east{location 38.9 -77.04;jurisdiction US;endpoints 127.0.1.1\n"
        "  capacity 4 gpus x 6rps}\n"
        "service chat.infer.example.com {steer geo ; all-down answer-nothing}\n"
    )
    tidy = format_text(messy)
    assert format_text(tidy) == tidy
    assert load_policy_text(tidy) == load_policy_text(messy)
