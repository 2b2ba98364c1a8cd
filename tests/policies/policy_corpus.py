"""The error corpus: malformed or invalid policies under ``corpus/`` with golden diagnostics.

Each case is ``corpus/<name>.dp`` (its first line a ``# what this case tests`` comment) and
``corpus/<name>.expected``, the exact text ``director policy check`` prints for it. Files are
read relative to the corpus directory so that goldens never hold an absolute path.
``regen_goldens.py`` rewrites the goldens; ``test_corpus.py`` compares against them.
"""

from __future__ import annotations

from pathlib import Path

from policies import check_policy

CORPUS = Path(__file__).parent / "corpus"


def case_names() -> list[str]:
    return sorted(path.stem for path in CORPUS.glob("*.dp"))


def _read(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def render_case(name: str) -> str:
    """What checking ``corpus/<name>.dp`` reports, as the golden file holds it."""
    result = check_policy(f"{name}.dp", reader=_read)
    if result.ok:
        return "ok: no problems found\n"
    return result.error().render() + "\n"


def golden_path(name: str) -> Path:
    return CORPUS / f"{name}.expected"
