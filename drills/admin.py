# SPDX-License-Identifier: Apache-2.0
"""A client of the admin API, the only control channel a drill uses.

The token comes from ``--token``, else ``DIRECTOR_TOKEN``, else the ``admin.token`` file
that ``director up`` writes into its run dir (``/tmp/director-<uid>/``). Every call is
appended to ``calls`` (method, path, body, status, answer, time) for the journal; an error
answer raises ``AdminApiError`` with the API's message and status.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from drills.errors import AdminApiError

DEFAULT_TARGET = "http://127.0.0.1:8080"
TOKEN_ENV = "DIRECTOR_TOKEN"
MAX_LOGGED = 2000


def default_run_dir() -> Path:
    return Path(f"/tmp/director-{os.getuid()}")


def find_token(explicit: str | None = None, run_dir: Path | None = None) -> str | None:
    """The admin token: explicit, then the environment, then the run dir's admin.token."""
    if explicit:
        return explicit.strip()
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = (run_dir or default_run_dir()) / "admin.token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class AdminClient:
    def __init__(self, base_url: str, token: str | None, *, timeout: float = 10.0,
                 clock: Callable[[], float] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.clock = clock or time.monotonic
        self.calls: list[dict[str, Any]] = []
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AdminClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, body: Any = None, *,
                      log: bool = True, journal: list[dict[str, Any]] | None = None) -> Any:
        """``journal``: also append the call there (a fault's own record of its calls)."""
        if self._session is None:
            raise AdminApiError("admin client is not open")
        url = self.base_url + path
        entry: dict[str, Any] = {"t": round(self.clock(), 3), "method": method, "path": path,
                                 "body": body}
        try:
            return await self._send(self._session, method, url, path, body, entry)
        finally:
            if "status" not in entry and "error" not in entry:
                entry["error"] = "cancelled before an answer came"
            if log:
                self.calls.append(entry)
            if journal is not None:
                journal.append(entry)

    @staticmethod
    async def _send(session: aiohttp.ClientSession, method: str, url: str, path: str,
                    body: Any, entry: dict[str, Any]) -> Any:
        try:
            async with session.request(method, url, json=body) as response:
                text = await response.text()
                entry["status"] = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            raise AdminApiError(f"{method} {url}: cannot reach the admin API "
                                f"({type(exc).__name__}: {exc})") from exc
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = text
        entry["answer"] = data if len(text) <= MAX_LOGGED else text[:MAX_LOGGED]
        if response.status >= 400:
            message = data.get("error") or data.get("detail") if isinstance(data, dict) \
                else text
            raise AdminApiError(f"{method} {path}: HTTP {response.status}: "
                                f"{message or response.reason}", response.status)
        return data

    async def status(self) -> dict[str, Any]:
        return await self._object("/api/v1/status")

    async def services(self) -> dict[str, Any]:
        return await self._object("/api/v1/services")

    async def processes(self) -> dict[str, Any]:
        return await self._object("/api/v1/processes")

    async def _object(self, path: str) -> dict[str, Any]:
        data = await self.request("GET", path, log=False)
        if not isinstance(data, dict):
            raise AdminApiError(f"GET {path}: expected a JSON object, got {type(data).__name__}")
        return data
