"""Rewrite the golden files of the error corpus. Run by hand, never by the tests:

    .venv/bin/python tests/policies/regen_goldens.py [CASE ...]

then read every changed golden (``git diff tests/policies/corpus``) before committing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_corpus import case_names, golden_path, render_case


def main(argv: list[str]) -> int:
    names = argv or case_names()
    changed = 0
    for name in names:
        text = render_case(name)
        path = golden_path(name)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed += 1
            print(f"wrote {path.name}")
    print(f"{len(names)} cases, {changed} goldens changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
