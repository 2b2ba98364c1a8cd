"""The supervisor's control API, HTTP + JSON on a Unix socket (only local users with access
to the run directory reach it; the admin API proxies its chaos routes here).

- ``GET /processes``: every child with its state;
- ``POST /actions`` ``{"action": "kill"|"freeze"|"restore", "names": [...], "ttl": 30}``:
  names are fnmatch patterns (``gpu/eu-west/*``); 400 for an unknown action or names that
  match nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from aiohttp import web

DEFAULT_TTL = 120.0
MAX_TTL = 600.0
ACTIONS = ("kill", "freeze", "restore")


class Controlled(Protocol):
    def processes(self) -> list[dict[str, object]]: ...

    def act(self, action: str, patterns: list[str], ttl: float) -> list[str]: ...


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def parse_action(body: object) -> tuple[str, list[str], float]:
    """Validate an ``/actions`` body; raises ``ValueError`` naming the offending field."""
    if not isinstance(body, dict):
        raise ValueError("expected a JSON object")
    action = body.get("action")
    if action not in ACTIONS:
        raise ValueError(f"action: expected one of {', '.join(ACTIONS)}, got {action!r}")
    names = body.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError("names: expected a non-empty list of process names or patterns")
    ttl = body.get("ttl", DEFAULT_TTL)
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL:
        raise ValueError(f"ttl: expected seconds in (0, {MAX_TTL:g}], got {ttl!r}")
    return action, names, float(ttl)


def build_control_app(target: Controlled) -> web.Application:
    async def processes(_request: web.Request) -> web.Response:
        return web.json_response({"processes": target.processes()})

    async def actions(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read() or b"null")
            action, names, ttl = parse_action(body)
        except ValueError as exc:
            return _error(400, str(exc))
        affected = target.act(action, names, ttl)
        if not affected:
            return _error(400, f"names: no process matches {', '.join(names)}")
        return web.json_response({"affected": affected})

    app = web.Application(client_max_size=64 * 1024)
    app.router.add_get("/processes", processes)
    app.router.add_post("/actions", actions)
    return app


async def serve_control(target: Controlled, path: Path) -> web.AppRunner:
    """Listen on the Unix socket ``path`` (mode 0600); stop with ``await runner.cleanup()``."""
    runner = web.AppRunner(build_control_app(target), access_log=None)
    await runner.setup()
    path.unlink(missing_ok=True)
    await web.UnixSite(runner, str(path)).start()
    path.chmod(0o600)
    return runner
