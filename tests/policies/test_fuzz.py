"""Bad input never raises: random bytes and random token soup come back as diagnostics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies import check_policy
from policies.errors import PolicyError
from policies.formatter import format_text

FUZZ = settings(max_examples=150)

# Words of the language, near misses and odd characters, glued together at random.
WORDS = [
    "zone", "region", "service", "residency", "spillover", "failover", "gpu", "include",
    "healthcheck", "jurisdiction", "state", "soa", "ns", "location", "endpoints", "capacity",
    "allow", "clients", "all-down", "unknown-location", "steer", "priority", "regions", "to",
    "at", "max", "fallback", "any", "refuse", "answer-allowed", "answer-nothing", "country",
    "continent", "EU", "US", "DE", "eu-west", "us-east", "infer.example.com",
    "chat.infer.example.com", "ns1.infer.example.com", "127.0.0.1", "::1", "10.0.0.1/8",
    "30s", "30", "5x", "85%", "85", "300rps", "4", "gpus", "x", "6rps", "-91", "1e999", "nan",
    "http://[::1", "http://a:0", '"inc.dp"', '"', '"\\', "\\", "{", "}", ";", "#", "\n", "\t",
    " ", "\r", "\x00", "\u2028", "\x0c", "é", "url", "models", "engine", "vllm",
]
SOUP = st.lists(st.sampled_from(WORDS), max_size=80).map(" ".join)


def _check_text(text: str, files: dict[str, str] | None = None):
    contents = {"fuzz.dp": text, **(files or {})}

    def reader(path: str) -> str:
        if path not in contents:
            raise FileNotFoundError(2, "No such file or directory", path)
        return contents[path]

    return check_policy("fuzz.dp", reader=reader)


def _assert_diagnosed(result) -> None:
    if not result.ok:
        assert result.policy is None
        assert result.diagnostics
        result.error().render()  # rendering never fails either
        for diagnostic in result.diagnostics:
            diagnostic.as_dict()


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    result = check_policy("fuzz.dp", reader=lambda _path: data.decode("utf-8"))
    _assert_diagnosed(result)


@FUZZ
@given(st.text(max_size=300))
def test_random_text_never_raises(text: str) -> None:
    _assert_diagnosed(_check_text(text))


@FUZZ
@given(SOUP, SOUP)
def test_token_soup_never_raises(text: str, included: str) -> None:
    _assert_diagnosed(_check_text(text, {"inc.dp": included}))


@FUZZ
@given(SOUP)
def test_format_raises_only_policy_error(text: str) -> None:
    try:
        formatted = format_text(text, "fuzz.dp")
    except PolicyError as error:
        assert error.diagnostics
    else:
        assert format_text(formatted, "fuzz.dp") == formatted


def test_deep_nesting_is_reported_not_a_recursion_error() -> None:
    result = _check_text("a {" * 5000 + "}" * 5000)
    assert any("nested too deeply" in d.message for d in result.diagnostics)
    result = _check_text("{" * 5000)
    assert not result.ok


def test_unreadable_include_names_are_reported() -> None:
    result = _check_text('include "a\x00b"\n')
    assert not result.ok
    assert "cannot include" in result.error().render()
