"""The `director policy` commands, run as a user would: a subprocess of the installed CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"


def director(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "director", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_check_examples_ok():
    result = director("policy", "check", str(EXAMPLES / "global.dp"), str(EXAMPLES / "minimal.dp"))
    assert result.returncode == 0, result.stderr
    assert "global.dp: ok (4 regions, 3 services, residency proved on 26 paths" in result.stdout
    assert "minimal.dp: ok (2 regions, 1 service, no residency rules)" in result.stdout


def test_check_reports_positioned_errors_and_exits_1(tmp_path):
    bad = tmp_path / "bad.dp"
    bad.write_text(
        "zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }\n"
        "region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; "
        "capacity 10rps }\n"
        "service chat.infer.example.com {\n"
        "    regions eu-wst\n"
        "    all-down answer-nothing\n"
        "}\n"
    )
    result = director("policy", "check", "bad.dp", cwd=tmp_path)
    assert result.returncode == 1
    assert "bad.dp:4:13: error: unknown region 'eu-wst'" in result.stderr
    assert "did you mean 'eu-west'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_json_lists_the_residency_paths():
    result = director("policy", "check", "--json", str(EXAMPLES / "global.dp"))
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True
    paths = {(p["service"], p["rule"], p["path"]) for p in report["residency"]}
    assert ("chat.infer.example.com", "eu-gdpr", "unknown client location") in paths
    assert report["engine_decisions"] > 1000
    assert report["engine_violations"] == []


def test_check_missing_file_is_an_error_not_a_traceback(tmp_path):
    result = director("policy", "check", str(tmp_path / "nope.dp"))
    assert result.returncode == 1
    assert "cannot read the policy" in result.stderr
    assert "Traceback" not in result.stderr


def test_fmt_check_and_rewrite(tmp_path):
    target = tmp_path / "p.dp"
    shutil.copy(EXAMPLES / "minimal.dp", target)
    assert director("policy", "fmt", "--check", str(target)).returncode == 0
    target.write_text(target.read_text().replace("    steer geo", "  steer    geo  "))
    assert director("policy", "fmt", "--check", str(target)).returncode == 1
    assert director("policy", "fmt", str(target)).returncode == 0
    assert target.read_text() == (EXAMPLES / "minimal.dp").read_text()


@pytest.mark.parametrize(("client", "geoip", "flags", "allowed"), [
    ("89.160.20.112", "test", [], {"eu-west", "eu-central"}),
    ("89.160.20.112", "test", ["--down", "eu-west", "--load", "eu-central=300"],
     {"eu-west", "eu-central"}),
    ("2.2.2.2", None, [], {"eu-west", "eu-central"}),
    ("2.2.2.2", None, ["--down", "eu-west", "--down", "eu-central"], {"eu-west", "eu-central"}),
    ("216.160.83.56", "test", [], {"us-east"}),
    ("8.8.8.8", None, [], {"us-east"}),
], ids=["se-test", "se-test-degraded", "fr-geolite", "fr-geolite-all-down", "us-test",
        "us-geolite"])
def test_explain_acceptance(client, geoip, flags, allowed, maxmind_test_city):
    args = ["policy", "explain", str(EXAMPLES / "global.dp"), "--client", client,
            "--name", "chat.infer.example.com", "--json", *flags]
    if geoip == "test":
        args += ["--geoip", str(maxmind_test_city)]
    result = director(*args)
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)
    assert decision["regions"]
    assert set(decision["regions"]) <= allowed
    assert [step["stage"] for step in decision["steps"]][:3] == ["locate", "filter", "filter"]


def test_explain_human_output_names_each_step():
    result = director("policy", "explain", str(EXAMPLES / "global.dp"), "--client", "2.2.2.2",
                      "--name", "chat.infer.example.com", "--down", "eu-central")
    assert result.returncode == 0, result.stderr
    assert "dropped eu-central: down" in result.stdout
    assert "dropped us-east: not allowed by residency eu-gdpr" in result.stdout
    assert "answer: eu-west (127.0.2.1); reason: failover" in result.stdout


@pytest.mark.parametrize("args", [
    ["--client", "not-an-ip"],
    ["--client", "2.2.2.2", "--down", "mars-1"],
    ["--client", "2.2.2.2", "--load", "eu-west=lots"],
    [],
], ids=["bad-ip", "unknown-region", "bad-load", "no-client"])
def test_explain_bad_input_is_a_clear_error(args):
    result = director("policy", "explain", str(EXAMPLES / "global.dp"),
                      "--name", "chat.infer.example.com", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")


def test_diagnostic_positions_print_as_written_never_as_emoji(tmp_path):
    """Rich would turn ':100:' into an emoji; a file:line:col must reach the console as is."""
    bad = tmp_path / "C-spill-leak.dp"
    padding = "# padding\n" * 99
    bad.write_text(
        padding
        + "zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }\n"
        + "region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; "
        "capacity 10rps }\n"
        + "service chat.infer.example.com {\n"
        + "    regions eu-wst\n"
        + "    all-down answer-nothing\n"
        + "}\n"
    )
    result = director("policy", "check", bad.name, cwd=tmp_path)
    assert result.returncode == 1
    assert "C-spill-leak.dp:103:13: error: unknown region 'eu-wst'" in result.stderr
    assert "\N{HUNDRED POINTS SYMBOL}" not in result.stderr


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


def test_check_warns_and_passes_then_fails_with_strict(tmp_path):
    (tmp_path / "chat.dp").write_text(CROSSING)
    relaxed = director("policy", "check", "chat.dp", cwd=tmp_path)
    assert relaxed.returncode == 0, relaxed.stderr
    assert "chat.dp:7:59: warning: residency: service chat.infer.example.com, rule eu: " \
        "allows us-east (US)" in relaxed.stderr
    assert "chat.dp: ok (2 regions, 1 service, residency proved on" in relaxed.stdout
    assert relaxed.stdout.rstrip().endswith(", 1 warning)")

    strict = director("policy", "check", "--strict", "chat.dp", cwd=tmp_path)
    assert strict.returncode == 1
    assert "chat.dp:7:59: warning:" in strict.stderr and "chat.dp: 1 error" in strict.stderr

    report = json.loads(director("policy", "check", "--json", "chat.dp", cwd=tmp_path).stdout)
    assert report["ok"] is True and report["errors"] == []
    assert [w["severity"] for w in report["warnings"]] == ["warning"]
    assert report["engine"]["services"][0]["missing"] == []

    silenced = CROSSING.replace("all-down answer-allowed }",
                                "all-down answer-allowed; cross-border us-east }")
    (tmp_path / "chat.dp").write_text(silenced)
    quiet = director("policy", "check", "--strict", "chat.dp", cwd=tmp_path)
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr
