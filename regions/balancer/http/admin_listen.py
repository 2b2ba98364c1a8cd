# SPDX-License-Identifier: Apache-2.0
"""Where a balancer's admin listener binds (``/metrics``, ``/_admin/*``: see ``admin``).

Bound to loopback (the default, ``127.0.0.1``) it needs no credential: whoever can reach it
runs on the machine. Bound anywhere else it needs a bearer token (the command line reads it
from ``--admin-token-file``), and an ``AdminListen`` off loopback without one cannot be
built (``BalancerConfigError``): the balancer refuses to start. No HTTP stack here, so the
command line reads the defaults cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from regions.balancer.errors import BalancerConfigError
from state.ports import is_loopback

DEFAULT_ADMIN_PORT = 9180  # the command line's default; in code the default is port 0


@dataclass(frozen=True)
class AdminListen:
    """Where the admin listener binds, and the bearer token it requires (None: none, which
    only loopback may do). Port 0: any free port (``Balancer.admin_port`` says which)."""

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and not self.token.strip():
            raise BalancerConfigError("admin listener: the token is empty")
        if self.token is None and not is_loopback(self.host):
            raise BalancerConfigError(
                f"admin listener: {self.host} is not a loopback address; off loopback the "
                "admin routes need a token (--admin-token-file)")


def read_token_file(path: str | Path) -> str:
    """The token in ``path`` (its first line, stripped); raises ``BalancerConfigError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BalancerConfigError(f"--admin-token-file {path}: {exc}") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise BalancerConfigError(f"--admin-token-file {path}: the file is empty")
    return token


