"""run_worker as a CLI calls it: policy loaded up front, errors a CLI can report, queues."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from celery import Celery

from policies import PolicyError
from tests.policy_text import make_policy, region
from workers.policy_source import PolicyFile
from workers.runner import resolve_queues, run_worker

EXAMPLE = Path(__file__).parents[2] / "policies" / "examples" / "minimal.dp"
POLICY = make_policy((region("us", {"a": "http://x:1"}), region("eu-west", {"b": "http://y:1"})))


def test_resolve_queues() -> None:
    assert resolve_queues(POLICY, None) == ["probes.us", "probes.eu-west"]
    assert resolve_queues(POLICY, []) == ["probes.us", "probes.eu-west"]
    assert resolve_queues(POLICY, ["eu-west"]) == ["probes.eu-west"]
    assert resolve_queues(POLICY, ["probes.eu-west,us", "us"]) == ["probes.eu-west", "probes.us"]
    with pytest.raises(ValueError, match=r"'ap' is not a region's probe queue.*probes\.us"):
        resolve_queues(POLICY, ["ap"])


def test_policy_file_loaded_up_front(tmp_path: Path) -> None:
    path = tmp_path / "p.dp"
    shutil.copy(EXAMPLE, path)
    source = PolicyFile.loaded(path)
    policy = source.policy
    assert policy is not None and [r.name for r in policy.regions] == ["us-east", "eu-west"]
    assert source.poll() is policy  # beat's first poll gets it without a second load
    assert source.poll() is None  # unchanged file
    with pytest.raises(PolicyError, match="no such file"):
        PolicyFile.loaded(tmp_path / "missing.dp")
    (tmp_path / "bad.dp").write_text("region x {\n")
    with pytest.raises(PolicyError, match="never closed"):
        PolicyFile.loaded(tmp_path / "bad.dp")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Celery, list[str]]]:
    calls: list[tuple[Celery, list[str]]] = []
    monkeypatch.setattr(Celery, "worker_main", lambda app, argv: calls.append((app, argv)))
    return calls


def test_run_worker_from_a_policy_file(tmp_path: Path, started) -> None:
    path = tmp_path / "p.dp"
    shutil.copy(EXAMPLE, path)
    run_worker(path, "redis://127.0.0.1:1/0", queues=["eu-west"], concurrency=8, beat=True)
    [(app, argv)] = started
    assert argv[:6] == ["worker", "-Q", "probes.eu-west", "--pool", "threads", "--concurrency"]
    assert argv[6] == "8" and argv[-1] == "--beat"
    settings = app.conf.director_settings
    assert (settings.redis_url, settings.policy_path) == ("redis://127.0.0.1:1/0", str(path))
    assert app.conf.director_policy_source.poll() is not None  # beat starts with the policy


def test_run_worker_errors_a_cli_reports(
    tmp_path: Path, started, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DIRECTOR_POLICY", raising=False)
    with pytest.raises(PolicyError, match="no such file"):
        run_worker(tmp_path / "missing.dp", "redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="not a region's probe queue"):
        run_worker(EXAMPLE, "redis://127.0.0.1:1/0", queues=["mars"])
    with pytest.raises(ValueError, match="needs a policy"):
        run_worker(None, "redis://127.0.0.1:1/0")
    assert started == []
