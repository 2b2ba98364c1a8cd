"""A zone's keys in a directory: one ``K<zone>+<alg>+<tag>.json`` file per key, mode 0600.

Writers (``director dnssec``) replace a file atomically (write, fsync, rename), so a DNS
server reading the directory sees each key whole. A file that does not parse is skipped
with a warning: the server keeps signing with the keys it can read.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from director.dnssec.keys import ZoneKey

log = logging.getLogger(__name__)


def key_file(directory: Path, key: ZoneKey) -> Path:
    return directory / f"K{key.zone}+{key.algorithm:03d}+{key.tag:05d}.json"


def load_keys(directory: Path, zone: str) -> list[ZoneKey]:
    """The readable keys of ``zone`` in ``directory`` (missing directory: none)."""
    zone = zone.lower().rstrip(".")
    keys = []
    for path in sorted(directory.glob(f"K{zone}+*.json")):
        try:
            key = ZoneKey.from_json(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            log.warning("DNSSEC key %s skipped: %s", path, exc)
            continue
        if key.zone == zone:
            keys.append(key)
    return keys


def save_keys(directory: Path, keys: list[ZoneKey]) -> None:
    """Write every key of ``keys`` (each replaced atomically)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for key in keys:
        target = key_file(directory, key)
        text = json.dumps(key.to_json(), indent=1, sort_keys=True)
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=".key-")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def directory_version(directory: Path, zone: str) -> tuple:
    """Changes whenever a key file of ``zone`` is added, replaced or removed."""
    try:
        return tuple(sorted((entry.name, entry.stat().st_mtime_ns, entry.stat().st_ino)
                            for entry in os.scandir(directory)
                            if entry.name.startswith(f"K{zone}+")
                            and entry.name.endswith(".json")))
    except OSError:
        return ()
