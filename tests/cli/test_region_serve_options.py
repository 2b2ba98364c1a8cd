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
        (["--redis", "redis://127.0.0.1:1/0", "--follow-policy", "--no-follow-policy"],
         "--follow-policy and --no-follow-policy contradict each other"),
        (["--overflow", "sideways"], "expected off, redirect or proxy, got 'sideways'"),
        (["--sibling", "eu-central"], "expected REGION=URL, got 'eu-central'"),
        (["--scorer", "nope=1"], "unknown scorer 'nope'"),
        (["--scorer", "prefix-affinity=heavy"], "weight must be a number, got 'heavy'"),
        (["--picker", "nope"], "unknown picker 'nope'"),
    ],
    ids=[
        "follow-needs-redis",
        "follow-contradiction",
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


def test_admin_listener_off_loopback_without_a_token_refuses_to_start() -> None:
    status, text = invoke("--listen", "127.0.0.1:0", "--admin-listen", "0.0.0.0:9180")
    assert status == 2, text
    assert "0.0.0.0 is not a loopback address" in text and "--admin-token-file" in text


def test_admin_token_file_must_hold_a_token(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    status, text = invoke("--listen", "127.0.0.1:0", "--admin-listen", "10.0.0.5:9180",
                          "--admin-token-file", str(empty))
    assert status == 2 and "the file is empty" in text, text
    status, text = invoke("--listen", "127.0.0.1:0", "--admin-token-file",
                          str(tmp_path / "missing"))
    assert status == 2 and "--admin-token-file" in text, text


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


@pytest.mark.parametrize(
    ("args", "late_binding", "ttft_factor", "growth"),
    [([], False, 0.0, 1.25), (["--late-binding"], True, 0.0, 1.25),
     (["--ttft-eject", "4"], False, 4.0, 1.25), (["--provisional-growth", "0"], False, 0.0, 0.0)],
    ids=["defaults", "late-binding", "ttft-eject", "provisional-growth"],
)
def test_opt_in_mechanisms_reach_the_balancer(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                              late_binding: bool, ttft_factor: float,
                                              growth: float) -> None:
    import regions.balancer

    seen = {}

    async def serve(_region: object, _gpus: object, config: object, **_kwargs: object) -> None:
        seen["config"] = config

    monkeypatch.setattr(regions.balancer, "serve", serve)
    status, text = invoke("--listen", "127.0.0.1:0", *args)
    assert status == 0, text
    config = seen["config"]
    assert config.capacity.late_binding is late_binding
    assert config.outliers.ttft_factor == ttft_factor
    assert config.capacity.provisional_growth == growth


def test_a_negative_ttft_factor_is_a_usage_error() -> None:
    status, text = invoke("--ttft-eject", "-1")
    assert status == 2 and "--ttft-eject" in text, text
