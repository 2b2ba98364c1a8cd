"""Client of the supervisor's control socket (HTTP/1.1 + JSON over a Unix socket).

``GET /processes`` lists the supervised processes; ``POST /actions`` kills, freezes or
restores them by name pattern. Answers are passed through as the supervisor gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from director.api.errors import BadGateway

CONTROL_TIMEOUT_S = 5.0


class ControlClient:
    """Talks to ``director up``'s supervisor over ``socket``."""

    def __init__(self, socket: Path, timeout: float = CONTROL_TIMEOUT_S) -> None:
        self.socket = socket
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def processes(self) -> tuple[int, Any]:
        """The supervisor's status and JSON body for ``GET /processes``."""
        return await self._call("GET", "/processes")

    async def actions(self, body: Any) -> tuple[int, Any]:
        """The supervisor's status and JSON body for ``POST /actions``."""
        return await self._call("POST", "/actions", body)

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        connector = aiohttp.UnixConnector(path=str(self.socket))
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=self._timeout) as http,
                http.request(method, f"http://supervisor{path}", json=body) as resp,
            ):
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {"error": (await resp.text())[:500]}
                return resp.status, data
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise BadGateway(f"supervisor control socket {self.socket} unreachable: "
                             f"{exc or type(exc).__name__}") from exc
