"""Persist accepted policies in the store directory, each version atomically, never twice.

For version N: ``N.dp`` (the main file's text) and ``N.json`` (``{"version", "name", "text",
"files", "proofs", "digest"}``: everything needed to load it again, and the format ``PUT
/api/v1/policy`` takes). Files are written under temporary names first (``prepare``), before
the version is known, and linked into place once the shared state has accepted the policy
(``commit``), so a failure at any point leaves no partial version behind.

History is never overwritten: a version already on disk with the same sources is left as it
is; one with other sources (a store that lost its data and numbered a policy again) raises
``HistoryConflict`` and both files stay. ``highest()`` is the highest version on disk, which
the API never numbers below; ``newest()`` reads the versions from the newest down, which the
API starts from (``director.api.policy_start``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from state.policy_identity import policy_digest

log = logging.getLogger(__name__)


class HistoryConflict(FileExistsError):
    """A version on disk holds other sources than the one being written (kept as it is)."""


@dataclass(frozen=True)
class Prepared:
    """Temporary files of a policy not yet committed."""

    main: Path
    record: Path
    name: str
    text: str
    files: Mapping[str, str]
    proofs: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiskVersion:
    """One version read back from the store directory."""

    version: int
    name: str
    text: str
    files: Mapping[str, str] = field(default_factory=dict)
    proofs: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        return policy_digest(self.name, self.text, self.files)


class PolicyDisk:
    """The store directory (``RUN/policy``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def prepare(self, name: str, text: str, files: Mapping[str, str],
                proofs: tuple[str, ...] = ()) -> Prepared:
        """Write the policy under temporary names; raises ``OSError``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        main = self._temp(text)
        try:
            record = self._temp("")  # filled in by commit, once the version is known
        except OSError:
            main.unlink(missing_ok=True)
            raise
        return Prepared(main, record, name, text, dict(files), tuple(proofs))

    def commit(self, prepared: Prepared, version: int) -> Path:
        """Link the prepared files to ``<version>.dp`` / ``<version>.json``, never over a
        version already there; raises ``HistoryConflict`` (files kept) or ``OSError``."""
        digest = policy_digest(prepared.name, prepared.text, prepared.files)
        record = {"version": version, "name": prepared.name, "text": prepared.text,
                  "files": dict(prepared.files), "proofs": list(prepared.proofs),
                  "digest": digest}
        target = self.directory / f"{version}.dp"
        try:
            held = self._held(version)
            if held is not None:
                if held.digest != digest:
                    raise HistoryConflict(
                        f"{self.directory / f'{version}.json'}: version {version} on disk "
                        f"holds other sources ({held.digest[:12]}, not {digest[:12]}); kept")
                return target
            prepared.record.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                                       encoding="utf-8")
            _link_new(prepared.main, target, prepared.text)
            _link_new(prepared.record, self.directory / f"{version}.json", None)
        finally:
            self.discard(prepared)
        return target

    def discard(self, prepared: Prepared) -> None:
        prepared.main.unlink(missing_ok=True)
        prepared.record.unlink(missing_ok=True)

    def versions(self) -> list[int]:
        """The versions on disk, lowest first."""
        try:
            names = [p.stem for p in self.directory.glob("*.json")]
        except OSError:
            return []
        return sorted(int(stem) for stem in names if stem.isdigit())

    def highest(self) -> int:
        """The highest version on disk (0: none)."""
        return max(self.versions(), default=0)

    def read(self, version: int) -> DiskVersion:
        """Version ``version``; raises ``OSError`` or ``ValueError`` (malformed record)."""
        path = self.directory / f"{version}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("text"), str) \
                or not isinstance(data.get("name"), str):
            raise ValueError(f"{path}: not a policy record")
        files = data.get("files") or {}
        proofs = data.get("proofs") or []
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise ValueError(f"{path}: 'files' is not an object of path -> text")
        if not isinstance(proofs, list) or not all(isinstance(p, str) for p in proofs):
            proofs = []  # run the proofs again rather than refuse the version
        return DiskVersion(version, data["name"], data["text"], files, tuple(proofs))

    def newest(self) -> Iterator[DiskVersion]:
        """The readable versions, newest first (an unreadable one is logged and skipped)."""
        for version in reversed(self.versions()):
            try:
                yield self.read(version)
            except (OSError, ValueError) as exc:
                log.warning("api: policy store: version %d unreadable, skipped: %s",
                            version, exc)

    def _held(self, version: int) -> DiskVersion | None:
        if not (self.directory / f"{version}.json").exists():
            return None
        try:
            return self.read(version)
        except ValueError as exc:
            raise HistoryConflict(f"version {version} on disk is unreadable ({exc}); "
                                  "kept") from exc

    def _temp(self, text: str) -> Path:
        fd, name = tempfile.mkstemp(prefix=".pending-", dir=self.directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return Path(name)


def _link_new(source: Path, target: Path, same_text: str | None) -> None:
    """Hard-link ``source`` to ``target`` unless ``target`` exists: one left by an earlier
    commit that stopped half-way is kept when it holds ``same_text``."""
    try:
        os.link(source, target)
    except FileExistsError:
        if same_text is not None and target.read_text(encoding="utf-8") == same_text:
            return
        raise HistoryConflict(f"{target} exists; kept") from None
