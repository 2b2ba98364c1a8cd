"""``director api serve`` as a process: loopback only unless --allow-remote, errors that say
what is wrong, and a real server answering on the port it reports."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

from api_helpers import EXAMPLE

from director.api.auth import add_token


def director(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "director", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_serve_refuses_a_non_loopback_address_without_allow_remote(valkey):
    done = director("api", "serve", "--policy", str(EXAMPLE), "--redis", valkey.url,
                    "--listen", "0.0.0.0:0")
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0: not a loopback address" in done.stderr
    assert "--allow-remote" in done.stderr


def test_serve_reports_bad_inputs(tmp_path, valkey):
    bad = tmp_path / "bad.dp"
    bad.write_text("zone {\n")
    done = director("api", "serve", "--policy", str(bad), "--redis", valkey.url,
                    "--listen", "127.0.0.1:0")
    assert done.returncode == 1 and f"{bad}:" in done.stderr

    done = director("api", "serve", "--policy", str(EXAMPLE), "--redis", valkey.url,
                    "--listen", "127.0.0.1:0", "--tokens", str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "missing.json" in done.stderr


def test_serve_answers_on_the_port_it_reports(tmp_path, valkey, prefix):
    token = add_token(tmp_path / "tokens.json", "admin", "admin")
    process = subprocess.Popen(
        [sys.executable, "-m", "director", "api", "serve", "--policy", str(EXAMPLE),
         "--redis", valkey.url, "--listen", "127.0.0.1:0", "--state-prefix", prefix,
         "--tokens", str(tmp_path / "tokens.json"), "--audit-log", str(tmp_path / "audit.log"),
         "--policy-store", str(tmp_path / "policy"), "--dns", "127.0.0.1:5353"],
        stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        assert "director api: listening on http://127.0.0.1:" in line, line
        url = line.split("listening on ")[1].split()[0]
        request = urllib.request.Request(f"{url}/api/v1/status",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            status = json.load(resp)
        assert status["dns"]["listen"] == ["127.0.0.1:5353"]
        assert status["state"]["reachable"] is True
        assert (tmp_path / "policy" / "1.dp").read_text() == EXAMPLE.read_text()
    finally:
        process.terminate()
        _, rest = process.communicate(timeout=15)
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert process.returncode in (0, -15)
    assert "Application shutdown complete" in rest
