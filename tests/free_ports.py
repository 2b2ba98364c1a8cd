"""A copy of a policy whose GPU servers listen on free ports, so that tests which start them
(``director up --simulate``) never collide with a ``director up`` already running on the
same machine, which holds the example policy's fixed addresses (127.0.x.1y:8000)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from state.ports import free_port

GPU_URL = re.compile(r"http://(127\.\d+\.\d+\.\d+):(\d+)")


def on_free_ports(policy: Path, folder: Path) -> Path:
    """Copy ``policy`` and the ``regions/`` folder beside it into ``folder``, every GPU
    server URL on loopback moved to a free port; returns the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    regions = policy.parent / "regions"
    if regions.is_dir():
        shutil.copytree(regions, folder / "regions", dirs_exist_ok=True)
    shutil.copy(policy, folder / policy.name)
    taken: dict[str, str] = {}

    def move(match: re.Match[str]) -> str:
        key = match.group(0)
        if key not in taken:
            host = match.group(1)
            taken[key] = f"http://{host}:{free_port(host)}"
        return taken[key]

    for path in folder.rglob("*.dp"):
        path.write_text(GPU_URL.sub(move, path.read_text(encoding="utf-8")), encoding="utf-8")
    return folder / policy.name
