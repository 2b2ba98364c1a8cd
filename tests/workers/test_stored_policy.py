"""Beat follows the policy stored in Redis: the stored version wins, a broken one never does."""

from __future__ import annotations

from pathlib import Path

from policies import load_policy, read_sources
from state import StateStore
from workers.policy_source import StaticPolicy, StoredPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def test_stored_versions_replace_the_initial_policy(store: StateStore) -> None:
    initial = load_policy(str(EXAMPLE))
    source = StoredPolicy(store, StaticPolicy(initial))
    assert source.poll() == initial  # nothing stored: the file's policy
    assert source.poll() is None

    sources = read_sources(str(EXAMPLE))
    moved = sources.text.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9")
    store.set_policy(moved, name=sources.name, files=sources.files)
    followed = source.poll()
    assert followed is not None
    assert followed.region("eu-central").endpoints_v4 == ("127.0.3.9",)
    assert source.poll() is None

    store.set_policy("zone {", name=sources.name, files=sources.files)
    assert source.poll() is None and source.rejected == 2 and source.version == 1
