"""Network maps kept on disk: a restarted server has its map from the first query, equal
to the one it built; a change of classes, database or code names another file; unsafe,
torn and foreign files are ignored and the map is rebuilt."""

from __future__ import annotations

import dataclasses
import os
import pickle
import time
from pathlib import Path

from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine.location_class import classifier_key
from director.geo import GeoLocator
from director.geo_map_cache import load_maps, map_digest, save_maps


def _built(example_policy, geo: GeoLocator, folder: Path) -> DnsApp:
    app = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True,
                 map_cache=folder)
    assert app.map_ready is not None and app.map_ready.wait(30)
    return app


def test_a_restart_loads_the_map_it_built(example_policy, maxmind_test_city,
                                          tmp_path: Path) -> None:
    geo = GeoLocator(str(maxmind_test_city))
    first = _built(example_policy, geo, tmp_path)
    digest = map_digest(geo.path, classifier_key(example_policy))
    stored = tmp_path / f"{digest}.pickle"
    deadline = time.monotonic() + 10
    while not stored.exists():  # stored just after the map is handed over
        assert time.monotonic() < deadline
        time.sleep(0.01)
    again = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True,
                   map_cache=tmp_path)
    assert again.map_ready is not None and again.map_ready.is_set()  # at construction
    built, loaded = first.locator.network_map, again.locator.network_map
    assert built is not None and loaded is not None and loaded is not built
    assert (loaded.starts, loaded.prefixes, loaded.class_index, loaded.classes) == (
        built.starts, built.prefixes, built.class_index, built.classes)
    query = make_query("chat.infer.example.com", ecs="81.2.69.0/24").to_wire()
    assert again.respond(query, "127.0.0.1") == first.respond(query, "127.0.0.1")


def test_other_classes_or_another_database_name_other_maps(example_policy, geolite2,
                                                           maxmind_test_city) -> None:
    key = classifier_key(example_policy)
    moved = dataclasses.replace(example_policy, regions=tuple(
        dataclasses.replace(r, latitude=-r.latitude) for r in example_policy.regions))
    assert map_digest(geolite2.path, key) == map_digest(geolite2.path, key)
    assert map_digest(geolite2.path, key) != map_digest(geolite2.path, classifier_key(moved))
    assert map_digest(geolite2.path, key) != map_digest(str(maxmind_test_city), key)


def test_unsafe_torn_and_foreign_files_are_ignored(example_policy, geolite2_map,
                                                   tmp_path: Path) -> None:
    save_maps(tmp_path, "good", (geolite2_map, None))
    assert load_maps(tmp_path, "good") is not None
    os.chmod(tmp_path / "good.pickle", 0o666)
    assert load_maps(tmp_path, "good") is None  # others may write it
    (tmp_path / "torn.pickle").write_bytes(pickle.dumps((geolite2_map, None))[:1000])
    assert load_maps(tmp_path, "torn") is None
    (tmp_path / "foreign.pickle").write_bytes(pickle.dumps({"not": "a map"}))
    assert load_maps(tmp_path, "foreign") is None
    assert load_maps(tmp_path, "absent") is None
    (tmp_path / "blocked").write_text("a file where the folder should be")
    save_maps(tmp_path / "blocked" / "maps", "any", (geolite2_map, None))  # logged only


def test_the_folder_keeps_the_newest_maps(geolite2_map, tmp_path: Path,
                                          monkeypatch) -> None:
    monkeypatch.setattr("director.geo_map_cache.KEEP", 2)
    for name in ("a", "b", "c"):
        save_maps(tmp_path, name, (geolite2_map, None))
        time.sleep(0.01)
    assert sorted(p.stem for p in tmp_path.glob("*.pickle")) == ["b", "c"]
