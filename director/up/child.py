"""One supervised child process: started in its own process group, restarted with backoff
when it dies, and held down or frozen on purpose by chaos actions (each with a dead-man
deadline, so a fault undoes itself even if whoever injected it goes away)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from director.up.plan import ChildSpec

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.5
BACKOFF_MAX = 10.0
STABLE_AFTER = 30.0  # a child that ran this long restarts without accumulated backoff
MAX_HOLD = 600.0
READY_TIMEOUT = 60.0
_PR_SET_PDEATHSIG = 1


class ChildState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    FROZEN = "frozen"
    HELD = "held"
    BACKOFF = "backoff"
    EXITED = "exited"


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies, whatever the cause."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


async def tcp_ready(host: str, port: int) -> bool:
    """Whether a TCP connection to host:port succeeds within a second."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class Child:
    """A process the supervisor keeps running; ``events`` receives lines for the operator."""

    def __init__(self, spec: ChildSpec, log_dir: Path, events: Callable[[str], None]) -> None:
        self.spec = spec
        self.log_path = log_dir / (spec.name.replace("/", "_") + ".log")
        self.events = events
        self.state = ChildState.EXITED
        self.restarts = 0
        self.held_until: float | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._restore = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._thaw: asyncio.TimerHandle | None = None
        self._ready_task: asyncio.Task[bool] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.returncode is None else None

    def describe(self) -> dict[str, object]:
        spec = self.spec
        return {"name": spec.name, "role": spec.role, "region": spec.region, "gpu": spec.gpu,
                "pid": self.pid, "state": self.state.value, "restarts": self.restarts,
                "address": spec.address, "held_until": self.held_until}

    async def start(self) -> None:
        """Spawn the process and keep it alive in the background until ``stop``."""
        await self._spawn()
        self._task = asyncio.create_task(self._supervise(), name=f"child {self.spec.name}")

    async def _spawn(self) -> None:
        self.state = ChildState.STARTING
        with open(self.log_path, "ab") as logfile:
            self.process = await asyncio.create_subprocess_exec(
                *self.spec.command(), stdin=asyncio.subprocess.DEVNULL, stdout=logfile,
                stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                       **self.spec.env},
                start_new_session=True, preexec_fn=_die_with_parent)

    async def _supervise(self) -> None:
        backoff = BACKOFF_MIN
        while True:
            assert self.process is not None
            started = time.monotonic()
            code = await self.process.wait()
            if self._stopping:
                self.state = ChildState.EXITED
                return
            if self.state is ChildState.HELD:
                await self._wait_restore()
                if self._stopping:
                    return
                self.events(f"{self.spec.name}: restored")
                backoff = BACKOFF_MIN
            else:
                if time.monotonic() - started > STABLE_AFTER:
                    backoff = BACKOFF_MIN
                self.events(f"{self.spec.name}: exited with status {code}; restarting in "
                            f"{backoff:g} s (log: {self.log_path})")
                self.state = ChildState.BACKOFF
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                if self._stopping:
                    self.state = ChildState.EXITED
                    return
            self.restarts += 1
            await self._spawn()
            self._ready_task = asyncio.create_task(self.wait_ready(READY_TIMEOUT))

    async def wait_ready(self, timeout: float) -> bool:
        """Wait until the child's port accepts (or, without one, it is alive a moment
        after start); marks it running. False when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stopping:
            if self.spec.ready_tcp is None:
                await asyncio.sleep(0.3)
                if self.pid is not None:
                    self.mark_running()
                    return True
            elif self.pid is not None and await tcp_ready(*self.spec.ready_tcp):
                self.mark_running()
                return True
            await asyncio.sleep(0.1)
        return False

    async def _wait_restore(self) -> None:
        timeout = max(0.0, (self.held_until or time.time()) - time.time())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._restore.wait(), timeout)
        self._restore.clear()
        self.held_until = None

    def mark_running(self) -> None:
        if self.state is ChildState.STARTING:
            self.state = ChildState.RUNNING

    def _signal(self, signum: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def kill(self, ttl: float) -> None:
        """SIGKILL the process group and keep it down until ``restore`` or ``ttl`` seconds."""
        self._cancel_thaw()
        self._signal(signal.SIGCONT)
        self.held_until = time.time() + min(ttl, MAX_HOLD)
        self._restore.clear()
        self.state = ChildState.HELD
        self._signal(signal.SIGKILL)

    def freeze(self, ttl: float) -> None:
        """SIGSTOP: sockets stay open and nothing answers (a gray failure), for ``ttl`` s."""
        if self.state is ChildState.HELD:
            return
        self._cancel_thaw()
        self._signal(signal.SIGSTOP)
        self.state = ChildState.FROZEN
        self.held_until = time.time() + min(ttl, MAX_HOLD)
        self._thaw = asyncio.get_running_loop().call_later(min(ttl, MAX_HOLD), self.restore)

    def restore(self) -> None:
        """Undo ``kill`` or ``freeze`` now."""
        self._cancel_thaw()
        if self.state is ChildState.FROZEN:
            self._signal(signal.SIGCONT)
            self.state = ChildState.RUNNING
            self.held_until = None
            self.events(f"{self.spec.name}: thawed")
        elif self.state is ChildState.HELD:
            self._restore.set()

    def _cancel_thaw(self) -> None:
        if self._thaw is not None:
            self._thaw.cancel()
            self._thaw = None

    async def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the process group, SIGKILL after ``timeout``; no restart."""
        self._stopping = True
        self._cancel_thaw()
        self._restore.set()
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        if self.process is not None and self.process.returncode is None:
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self._signal(signal.SIGKILL)
                await self.process.wait()
        # Grandchildren (a Celery pool, say) share the group: make sure none outlives us.
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state = ChildState.EXITED
