"""Persist accepted policies in the store directory, each version atomically.

For version N: ``N.dp`` (the main file's text) and ``N.json`` (``{"version", "name", "text",
"files"}``: everything needed to load it again). Files are written under temporary names
first (``prepare``), before the version is known, and renamed into place once the shared
state has accepted the policy (``commit``), so a failure at any point leaves no partial
version behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prepared:
    """Temporary files of a policy not yet committed."""

    main: Path
    record: Path
    name: str
    text: str
    files: Mapping[str, str]


class PolicyDisk:
    """The store directory (``RUN/policy``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def prepare(self, name: str, text: str, files: Mapping[str, str]) -> Prepared:
        """Write the policy under temporary names; raises ``OSError``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        main = self._temp(text)
        try:
            record = self._temp("")  # filled in by commit, once the version is known
        except OSError:
            main.unlink(missing_ok=True)
            raise
        return Prepared(main, record, name, text, dict(files))

    def commit(self, prepared: Prepared, version: int) -> Path:
        """Rename the prepared files to ``<version>.dp`` / ``<version>.json``."""
        record = {"version": version, "name": prepared.name, "text": prepared.text,
                  "files": dict(prepared.files)}
        prepared.record.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                                   encoding="utf-8")
        os.replace(prepared.record, self.directory / f"{version}.json")
        target = self.directory / f"{version}.dp"
        os.replace(prepared.main, target)
        return target

    def discard(self, prepared: Prepared) -> None:
        prepared.main.unlink(missing_ok=True)
        prepared.record.unlink(missing_ok=True)

    def _temp(self, text: str) -> Path:
        fd, name = tempfile.mkstemp(prefix=".pending-", dir=self.directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return Path(name)
