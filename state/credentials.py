"""Credentials for the shared state: in the URL, or a user and a password file.

A state URL may carry its credentials (``redis://USER:PASSWORD@HOST:PORT/DB``), which suits a
one-off command. A long-running component should rather be given a URL without them and
its credentials through its environment::

    DIRECTOR_REDIS_USER           the ACL user (one per role, see state.acl)
    DIRECTOR_REDIS_PASSWORD_FILE  a file holding its password (a Kubernetes Secret volume,
                                  a compose secret, a systemd credential, director up's
                                  run directory)

so that the password is never on a command line (which every local user can read) nor in a
log. The file is read again for every new connection, so a rotated password is used from
the next reconnect on without a restart. Credentials in the URL win over the environment.

``redacted(url)`` is how a URL is printed: ``redis://balancer:***@host:6379/0``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from state.errors import StateError

USER_ENV = "DIRECTOR_REDIS_USER"
PASSWORD_FILE_ENV = "DIRECTOR_REDIS_PASSWORD_FILE"


class PasswordFile(redis.CredentialProvider):  # type: ignore[misc]  # redis-py is untyped
    """``user`` (None: the ``default`` user) with the password in ``path``, read afresh
    for every connection."""

    def __init__(self, user: str | None, path: Path) -> None:
        self.user = user
        self.path = path

    def password(self) -> str:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            # a ConnectionError reaches callers as StateUnavailable, like any failed connect
            raise redis.exceptions.ConnectionError(
                f"{self.path}: cannot read the state password: {exc.strerror or exc}") from exc
        if not text:
            raise redis.exceptions.ConnectionError(f"{self.path}: the state password is empty")
        return text

    def get_credentials(self) -> tuple[str] | tuple[str, str]:
        password = self.password()
        return (self.user, password) if self.user else (password,)

    async def get_credentials_async(self) -> tuple[str] | tuple[str, str]:
        return self.get_credentials()

    def __repr__(self) -> str:  # never the password
        return f"PasswordFile(user={self.user!r}, path={str(self.path)!r})"


def has_credentials(url: str) -> bool:
    """Whether ``url`` names a user or a password itself."""
    parts = urlsplit(url)
    return bool(parts.username or parts.password)


def from_env(url: str, env: Mapping[str, str] | None = None) -> PasswordFile | None:
    """The credentials the environment gives for ``url`` (None when the URL has its own,
    or the environment names no password file). Raises :class:`StateError` when the
    environment names a user without a password file."""
    env = os.environ if env is None else env
    if has_credentials(url):
        return None
    user = env.get(USER_ENV) or None
    path = env.get(PASSWORD_FILE_ENV) or None
    if path is None:
        if user is not None:
            raise StateError(f"{USER_ENV}={user} needs {PASSWORD_FILE_ENV} (the file "
                             "holding its password)")
        return None
    return PasswordFile(user, Path(path))


def client_options(url: str, env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Keyword arguments that give a redis-py client for ``url`` its credentials."""
    provider = from_env(url, env)
    return {"credential_provider": provider} if provider is not None else {}


def with_credentials(url: str, env: Mapping[str, str] | None = None) -> str:
    """``url`` with the environment's credentials written into it (for a client that takes
    only a URL, such as Celery's broker); read once, so a rotated password needs a restart."""
    provider = from_env(url, env)
    if provider is None:
        return url
    try:
        password = provider.password()
    except redis.exceptions.ConnectionError as exc:
        raise StateError(str(exc)) from exc
    return embed(url, provider.user, password)


def embed(url: str, user: str | None, password: str) -> str:
    """``url`` with ``user`` (None: the default user) and ``password`` in it."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    auth = f"{quote(user or '', safe='')}:{quote(password, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{auth}@{host}"))


def redacted(url: str) -> str:
    """``url`` as it may be printed: a password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def role_env(user: str, password_file: Path) -> dict[str, str]:
    """The environment that gives a child process ``user``'s credentials."""
    return {USER_ENV: user, PASSWORD_FILE_ENV: str(password_file)}
