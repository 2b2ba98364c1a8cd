"""Who each process of ``director up`` is in the shared state.

With the embedded Valkey, every run draws a random password for each ACL role of
:mod:`state.acl` (``api``, ``balancer``, ``worker``, ``dns``): the server gets only their
SHA-256 digests in ``valkey/users.conf``, each process the user of its role and the file of
its password (``credentials/<role>.password``) in its environment (``DIRECTOR_REDIS_USER``,
``DIRECTOR_REDIS_PASSWORD_FILE``), all of mode 0600 in the run directory; the ``default``
user is off. With ``--redis`` a URL that carries credentials is split the same way, so no
password is ever on a command line or in ``up.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from state.acl import ROLES, acl_file, new_password
from state.credentials import PasswordFile, role_env
from state.private_file import write_private

CREDENTIALS_DIR = "credentials"


@dataclass(frozen=True)
class StateLogins:
    """Role -> (ACL user, password file); a role without one connects as the URL says."""

    users: Mapping[str, tuple[str | None, Path]] = field(default_factory=dict)

    def env(self, role: str) -> dict[str, str]:
        """The environment that logs a child process of ``role`` in."""
        found = self.users.get(role)
        if found is None:
            return {}
        user, path = found
        return role_env(user or "default", path)

    def provider(self, role: str) -> PasswordFile | None:
        found = self.users.get(role)
        return PasswordFile(found[0], found[1]) if found is not None else None


def role_logins(run_dir: Path) -> tuple[StateLogins, dict[str, str]]:
    """Fresh random passwords for every role, written to the run directory; returns the
    logins and the passwords by role."""
    folder = run_dir / CREDENTIALS_DIR
    passwords = {role: new_password() for role in ROLES}
    users: dict[str, tuple[str | None, Path]] = {}
    for role, password in passwords.items():
        path = folder / f"{role}.password"
        write_private(path, password + "\n")
        users[role] = (role, path)
    return StateLogins(users), passwords


def embedded_logins(run_dir: Path) -> tuple[StateLogins, str]:
    """``role_logins``, with the ACL text of the server's users."""
    logins, passwords = role_logins(run_dir)
    return logins, acl_file(passwords)


def external_logins(run_dir: Path, url: str) -> tuple[str, StateLogins]:
    """``url`` without its credentials, and logins that give them to every role through a
    password file (no logins when the URL has none)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, StateLogins()
    path = run_dir / CREDENTIALS_DIR / "redis.password"
    write_private(path, unquote(parts.password) + "\n")
    user = unquote(parts.username) if parts.username else None
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return bare, StateLogins({role: (user, path) for role in ROLES})
