"""The audit log: one JSON line per change (who, what, when, outcome), appended and flushed.

Line: ``{"ts": 1714.0, "who": "admin", "action": "drain", "target": "region eu-west",
"detail": {...}, "outcome": "ok"}``. Without a file the lines go to the ``director.audit``
logger only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("director.audit")


class AuditLog:
    """Appends audit lines to ``path`` (created with mode 0600); safe across threads."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)

    def record(self, who: str, action: str, target: str, detail: Any = None,
               outcome: str = "ok") -> dict[str, Any]:
        """Append one line and return it."""
        line = {"ts": time.time(), "who": who, "action": action, "target": target,
                "detail": detail if detail is not None else {}, "outcome": outcome}
        text = json.dumps(line, sort_keys=True, default=str)
        log.info("%s", text)
        if self.path is not None:
            with self._lock:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, (text + "\n").encode())
                finally:
                    os.close(fd)
        return line
