"""One asyncio loop thread and one pooled aiohttp session per worker process.

Batch probes (:mod:`workers.probes.batch`) run their HTTP requests here: a Celery task (on any
pool: threads, solo, prefork) hands a coroutine to the loop with :meth:`ProbeSession.run` and
waits for it, so every task of the process shares one connection pool (keep-alive to each
target) instead of opening a client per probe. The loop thread starts on first use, again in
a forked child (prefork), and stops with :meth:`ProbeSession.close` (worker shutdown).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

import aiohttp

from workers.probes.http import MAX_BODY, HttpResult

T = TypeVar("T")

CONNECTION_LIMIT = 1024  # open connections per process; a batch is far smaller
KEEPALIVE_SECONDS = 30.0  # longer than any probe interval, so a probed target stays connected
HEADERS = {"User-Agent": "director-probe/1"}


class ProbeSession:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None

    def run(self, work: Callable[[aiohttp.ClientSession], Awaitable[T]], timeout: float) -> T:
        """Run ``work(session)`` on the probe loop; wait at most ``timeout`` seconds for it."""
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(self._with_session(work), loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"probe batch still running after {timeout:g}s") from None

    def close(self) -> None:
        """Close the session and stop the loop thread (a later ``run`` starts them again)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
            owned = self._pid == os.getpid()
        if loop is None or thread is None or not owned:
            return
        asyncio.run_coroutine_threadsafe(self._close_session(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # first use, or a forked child
                self._pid = os.getpid()
                self._session = None
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="probe-loop", daemon=True
                )
                self._thread.start()
            return self._loop

    async def _with_session(self, work: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=CONNECTION_LIMIT, limit_per_host=0, keepalive_timeout=KEEPALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector, headers=HEADERS, auto_decompress=False
            )
        return await work(self._session)

    async def _close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def fetch(session: aiohttp.ClientSession, url: str, *, timeout: float) -> HttpResult:
    """GET ``url`` within ``timeout`` seconds in all; never raises for I/O (see HttpResult)."""
    started = time.perf_counter()
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
        ) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.content.iter_chunked(64 * 1024):
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_BODY:
                    break
            return HttpResult(response.status, b"".join(chunks)[:MAX_BODY], _ms(started))
    except TimeoutError:
        return HttpResult(None, b"", _ms(started), f"TimeoutError: timed out after {timeout:g}s")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return HttpResult(None, b"", _ms(started), f"{type(exc).__name__}: {exc}")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


_shared = ProbeSession()


def shared_session() -> ProbeSession:
    """This process's probe session."""
    return _shared
