"""The repository stands on its own: no file reads data beside it (``../shared``) or names a
path of one developer's machine, and every vendored data set carries its README and license."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from director.datasets import REPOSITORY_DATA, data_dir, maxmind_test_db, trace_path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(data|research)\b")
MACHINE_PATH = re.compile(r"(?<![\w.])/(work|home|Users|root)/")
SKIP_SUFFIXES = {".mmdb", ".gz", ".png", ".ico", ".woff", ".woff2"}
THIS_FILE = Path(__file__).resolve()


def repository_files() -> list[Path]:
    """Files of the repository: tracked, plus new ones not ignored (what a commit would hold)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def text_files() -> list[Path]:
    return [p for p in repository_files()
            if p.suffix not in SKIP_SUFFIXES and p.resolve() != THIS_FILE
            and p.relative_to(ROOT).parts[0] != "data"]


def offending_lines(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_the_scan_sees_the_tree() -> None:
    names = {str(p.relative_to(ROOT)) for p in text_files()}
    assert {"README.md", "run", "director/datasets.py", "tests/conftest.py"} <= names


def test_nothing_reads_data_beside_the_repository() -> None:
    assert offending_lines(OUTSIDE) == []


def test_no_absolute_path_of_a_developer_machine() -> None:
    assert offending_lines(MACHINE_PATH) == []


@pytest.mark.parametrize("line", ["see ../shared/data/x", "shared/research/notes.md",
                                  'Path("/work/shared/data/t.csv")', "/root/.cache/x",
                                  "/home/me/src"])
def test_the_patterns_catch_what_they_are_for(line: str) -> None:
    assert OUTSIDE.search(line) or MACHINE_PATH.search(line)


@pytest.mark.parametrize("line", ["the shared state in Redis", "/etc/director/policy.dp",
                                  "/tmp/director-$UID/", "/var/lib/director"])
def test_the_patterns_leave_legitimate_text_alone(line: str) -> None:
    assert not OUTSIDE.search(line) and not MACHINE_PATH.search(line)


def data_sets() -> list[Path]:
    return sorted(p.parent for p in REPOSITORY_DATA.glob("*/*/README.md"))


def test_every_data_set_has_a_readme_and_a_license() -> None:
    sets = data_sets()
    assert {p.name for p in sets} >= {"azure-llm-2023", "mooncake-fast25-conversation",
                                      "mooncake-fast25-synthetic", "maxmind-test"}
    for folder in sets:
        files = {p.name for p in folder.iterdir()}
        if any(name.endswith((".mmdb", ".gz")) for name in files):
            assert any(name.startswith("LICENSE") for name in files), folder


def test_every_vendored_file_is_named_in_its_readme() -> None:
    for folder in data_sets():
        readme = (folder / "README.md").read_text(encoding="utf-8")
        for path in folder.iterdir():
            if path.suffix in {".mmdb", ".gz", ".csv"}:
                stem = path.name.split(".")[0]
                assert stem in readme, f"{path} is not described in {folder}/README.md"


def test_the_locator_points_into_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DIRECTOR_DATA", raising=False)
    assert data_dir() == ROOT / "data"
    assert maxmind_test_db().is_file()
    assert trace_path("azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz").is_file()


def test_a_setting_points_the_locator_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("DIRECTOR_DATA", str(tmp_path))
    assert trace_path("a/b.csv.gz") == tmp_path / "traces" / "a" / "b.csv.gz"
    assert maxmind_test_db("GeoLite2-ASN-Test") == \
        tmp_path / "geoip" / "maxmind-test" / "GeoLite2-ASN-Test.mmdb"
