"""The tenant key table's local copy: what a balancer started during a state outage serves.

A ``KeyTable`` with a file writes every table it reads from the shared state that differs
from the last one written, atomically and readable by its owner only (mode 0600)::

    {"version": 1, "saved_at": 1718000000.0,
     "keys": {"0123456789ab": {"tenant": "acme", "digest": "<sha256 hex>", "label": "",
                               "created": 1717000000.0}}}

Ids and SHA-256 digests of the secrets only, as the state has them: never a key itself.
A file that cannot be read or parsed is reported as ``KeyTableFileError`` (the balancer then
starts as if there were none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from state.private_file import write_private

KEY_TABLE_FILE = "tenant-keys.json"
VERSION = 1


class KeyTableFileError(Exception):
    """The key table file is missing, unreadable or not in the expected shape."""


def save_table(path: Path, entries: Mapping[str, Mapping[str, object]],
               now: float | None = None) -> None:
    """Write the stored keys' ``entries`` (id -> fields, as ``StoredKey.to_json``) to
    ``path`` (atomically, mode 0600)."""
    body = {"version": VERSION, "saved_at": time.time() if now is None else now,
            "keys": {key_id: dict(fields) for key_id, fields in entries.items()}}
    write_private(path, json.dumps(body, indent=1, sort_keys=True) + "\n")


def load_table(path: Path) -> tuple[dict[str, dict[str, object]], float]:
    """The entries in ``path`` and when they were saved; raises ``KeyTableFileError``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise KeyTableFileError(f"{path}: no saved key table") from exc
    except (OSError, ValueError) as exc:
        raise KeyTableFileError(f"{path}: cannot read the saved key table: {exc}") from exc
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("version") != VERSION \
            or not isinstance(entries, dict) \
            or not all(isinstance(fields, dict) for fields in entries.values()):
        raise KeyTableFileError(f'{path}: expected {{"version": {VERSION}, "keys": {{...}}}}')
    saved_at = data.get("saved_at")
    return ({str(k): v for k, v in entries.items()},
            float(saved_at) if isinstance(saved_at, (int, float)) else 0.0)
