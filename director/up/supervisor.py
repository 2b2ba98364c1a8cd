"""Start the children in order, wait for each group to be ready, keep them running, apply
chaos actions, and stop everything (reverse order) on request."""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from director.up.child import READY_TIMEOUT, Child
from director.up.control import serve_control
from director.up.plan import ChildSpec


class Supervisor:
    """The children of one ``director up``; ``run_dir/control.sock`` controls them."""

    def __init__(self, specs: list[ChildSpec], run_dir: Path,
                 events: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.events = events
        self.children = [Child(spec, run_dir / "logs", events) for spec in specs]
        self._control: web.AppRunner | None = None

    def child(self, name: str) -> Child:
        return next(child for child in self.children if child.spec.name == name)

    async def start_group(self, names: list[str], timeout: float = READY_TIMEOUT) -> list[str]:
        """Start these children together; returns the names not ready within ``timeout``."""
        group = [self.child(name) for name in names]
        for child in group:
            await child.start()
        results = await asyncio.gather(*(child.wait_ready(timeout) for child in group))
        return [child.spec.name for child, ready in zip(group, results, strict=True)
                if not ready]

    async def serve_control(self) -> None:
        self._control = await serve_control(self, self.run_dir / "control.sock")

    def processes(self) -> list[dict[str, object]]:
        return [child.describe() for child in self.children]

    def act(self, action: str, patterns: list[str], ttl: float) -> list[str]:
        """Apply a chaos action to every child whose name matches one of ``patterns``."""
        chosen = [child for child in self.children
                  if any(fnmatch.fnmatchcase(child.spec.name, p) for p in patterns)]
        for child in chosen:
            if action == "kill":
                child.kill(ttl)
            elif action == "freeze":
                child.freeze(ttl)
            else:
                child.restore()
            self.events(f"chaos: {action} {child.spec.name}"
                        + (f" for up to {ttl:g} s" if action != "restore" else ""))
        return [child.spec.name for child in chosen]

    async def stop(self) -> None:
        """Stop the control socket, then every child, last started first."""
        if self._control is not None:
            await self._control.cleanup()
            self._control = None
            (self.run_dir / "control.sock").unlink(missing_ok=True)
        for child in reversed(self.children):
            await child.stop()
