"""``director dnssec``: keygen, status, ds, rollover, confirm-ds and maintain on a key
directory, as an operator runs them."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from director.cli import build_app
from director.dnssec.key_directory import load_keys, save_keys
from director.dnssec.keys import Role

ZONE = "infer.example.com"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(build_app("dnssec"), ["dnssec", *args])
    return result.exit_code, result.output


def test_an_operator_creates_rolls_and_confirms_keys(tmp_path: Path,
                                                     example_policy_path: Path) -> None:
    where = ["--policy", str(example_policy_path), "--keys", str(tmp_path / "k")]
    code, out = _run("keygen", *where)
    assert code == 0 and out.startswith("csk ") and f"{ZONE}. IN DS " in out
    assert _run("keygen", *where)[0] == 1  # never overwrites a zone's keys
    (first,) = load_keys(tmp_path / "k", ZONE)
    code, out = _run("rollover", *where)
    assert code == 0 and "confirm-ds" in out
    new = next(k for k in load_keys(tmp_path / "k", ZONE) if k.tag != first.tag)
    assert _run("rollover", *where)[0] == 1  # one at a time
    code, out = _run("ds", *where)
    assert out.count(" IN DS ") == 2
    code, out = _run("confirm-ds", str(new.tag), *where, "--parent-ds-ttl", "0",
                     "--propagation", "0")
    assert code == 0 and f"csk {first.tag} retires at" in out
    code, out = _run("status", *where)
    assert code == 0 and f"parent should hold DS for: {new.tag}" in out
    assert _run("confirm-ds", "1", *where)[0] == 1


def test_maintain_rolls_a_zsk_past_its_lifetime(tmp_path: Path,
                                                example_policy_path: Path) -> None:
    keys = tmp_path / "k"
    where = ["--policy", str(example_policy_path), "--keys", str(keys)]
    assert _run("keygen", *where, "--split")[0] == 0
    code, out = _run("maintain", *where)
    assert code == 0 and out == ""
    aged = [k.with_times(activate=k.activate - 31 * 86400, publish=k.publish - 31 * 86400)
            for k in load_keys(keys, ZONE)]
    save_keys(keys, aged)
    code, out = _run("maintain", *where)
    assert code == 0 and out.strip() == "zsk rollover started"
    assert sorted(k.role.value for k in load_keys(keys, ZONE)) == ["ksk", "zsk", "zsk"]
    assert all(k.role is not Role.CSK for k in load_keys(keys, ZONE))
