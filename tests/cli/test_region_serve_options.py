"""`director region serve` options for the routing profile, overflow and policy following:
usage errors name the option and exit with status 2 before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from director.cli import app

POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def invoke(*args: str) -> tuple[int, str]:
    """Exit status and the error output with rich's box drawing and wrapping undone."""
    result = CliRunner().invoke(
        app, ["region", "serve", "--policy", str(POLICY), "--region", "eu-west", *args]
    )
    text = result.stderr or result.output
    return result.exit_code, " ".join(text.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--follow-policy"], "--follow-policy needs --redis"),
        (["--overflow", "sideways"], "expected off, redirect or proxy, got 'sideways'"),
        (["--sibling", "eu-central"], "expected REGION=URL, got 'eu-central'"),
        (["--scorer", "nope=1"], "unknown scorer 'nope'"),
        (["--scorer", "prefix-affinity=heavy"], "weight must be a number, got 'heavy'"),
        (["--picker", "nope"], "unknown picker 'nope'"),
    ],
    ids=[
        "follow-needs-redis",
        "overflow-mode",
        "sibling-pair",
        "scorer-name",
        "scorer-weight",
        "picker-name",
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    status, text = invoke(*args)
    assert status == 2 and message in text, text


def test_known_scorers_are_listed() -> None:
    _, text = invoke("--scorer", "nope=1")
    for name in ("prefix-affinity", "session-affinity", "outstanding-work"):
        assert name in text, text


def test_help_states_the_real_default_profile() -> None:
    """The help is generated from the balancer's defaults, so it cannot drift from them."""
    from regions.balancer import BalancerConfig

    result = CliRunner().invoke(app, ["region", "serve", "--help"], terminal_width=400)
    text = " ".join(result.output.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())
    config = BalancerConfig()
    scorers = " ".join(f"{name}={weight:g}" for name, weight in config.scorers)
    assert f"(default: {scorers})" in text, text
    assert f"(default: {config.picker})" in text, text
