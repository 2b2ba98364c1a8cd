"""Network maps kept on disk, so a restarted DNS server answers never-seen subnets at full
speed from its first query instead of after the ten-second walk (``geo_merge``).

A map is stored under a digest of what it depends on: the GeoIP database file (path, size,
modification time), the policy's location classes (``classifier_key``, encoded
canonically) and this code (``proof_digest.source_fingerprint``). Any change gives another
name, so a stale map is never read. The files are pickles, trusted as the code is: the
folder is created 0700, and a file another user owns or others may write is ignored.
Writes are atomic (temporary file, rename), and keep the ``KEEP`` newest maps of the
folder; a file that does not load is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import stat
import tempfile
from collections.abc import Hashable
from pathlib import Path

from director.geo_map import NetworkMap
from director.proof_digest import canonical, source_fingerprint

log = logging.getLogger(__name__)

Maps = tuple[NetworkMap, NetworkMap | None]
KEEP = 8  # maps kept per folder, the most recently stored (about 11 MB each)


def default_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "director" / "network-maps"


def map_digest(database: str, classes: Hashable) -> str:
    """The name of the maps of ``database`` under the location classes ``classes``."""
    info = os.stat(database)
    encoded = json.dumps(canonical(classes), sort_keys=True, separators=(",", ":"))
    text = f"{os.path.abspath(database)}\0{info.st_size}\0{info.st_mtime_ns}\0{encoded}"
    return hashlib.sha256(f"{source_fingerprint()}\0{text}".encode()).hexdigest()[:32]


def load_maps(folder: Path, digest: str) -> Maps | None:
    """The stored maps named ``digest``, or None (absent, unsafe or unreadable)."""
    path = folder / f"{digest}.pickle"
    try:
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        log.warning("network map %s ignored: owned by another user or writable by others",
                    path)
        return None
    try:
        with path.open("rb") as handle:
            maps = pickle.load(handle)
        if not isinstance(maps, tuple) or not isinstance(maps[0], NetworkMap):
            raise TypeError(type(maps).__name__)
        return maps
    except Exception as exc:  # a torn or foreign file: rebuild
        log.warning("network map %s ignored: %s", path, exc)
        return None


def save_maps(folder: Path, digest: str, maps: Maps) -> None:
    """Store ``maps`` as ``digest`` (a failure is logged: the cache is an optimisation)."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".map-")
        with os.fdopen(fd, "wb") as out:
            pickle.dump(maps, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, folder / f"{digest}.pickle")
        stored = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns)
        for old in stored[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("network map not stored in %s: %s", folder, exc)
