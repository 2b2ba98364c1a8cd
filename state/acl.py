"""Who may do what in the shared state: one Redis ACL user per role.

Every key of a deployment is under its prefix ``{p}`` (:mod:`state.keys`), and the probe
workers' Celery broker keys and channels under ``{p}:celery:`` (``workers.app``), so a user
per role can be limited to what that role writes:

==========  =========================================================================
user        may
==========  =========================================================================
api         read and write every ``{p}:*`` key and channel: policies, drains, tenant
            API keys, usage reads (the admin API, and ``director up`` storing the policy)
balancer    read ``{p}:*``; write its load (``{p}:load:region:*``), the tenants' quotas
            (``{p}:quota:*``), usage (``{p}:usage:*``) and refusal counts
            (``{p}:throttle:*``), its revisions' answer counts (``{p}:outcomes:*``);
            publish and subscribe ``{p}:changes``
worker      read ``{p}:*``; write probe health (``{p}:health:*``), scraped and probed
            load (``{p}:load:*``), latency (``{p}:latency``), the beat lease
            (``{p}:beat:*``); the Celery broker
            (``{p}:celery:*`` keys and channels, and the remote control channel
            ``{p}:celery:/{db}.celery.pidbox``, which kombu PSUBSCRIBEs: an ACL checks a
            pattern literally); ``{p}:changes``
dns         read ``{p}:*``; subscribe ``{p}:changes``; report the answers a keyless
            edge had no signature for (``{p}:dnssec:misses``)
==========  =========================================================================

Each role also writes its processes' heartbeats (``{p}:instances``: :mod:`state.instances`).

So a balancer, worker or DNS server that is taken over cannot mint tenant keys, store a
policy or drain a region. Every user runs any command but the ``@admin`` and ``@dangerous``
ones (no ``CONFIG``, ``ACL SETUSER``, ``FLUSHALL``, ``KEYS``, ``MONITOR``, ...); the key
and channel patterns do the rest. The ``default`` user is off, so a client that does not
authenticate is refused (``NOAUTH``). Passwords are stored as SHA-256 digests
(``#<hex>``), so the ACL file itself reveals none.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping

ROLES = ("api", "balancer", "worker", "dns")
CELERY = "celery"  # the broker's sub-prefix: {p}:celery:
_COMMANDS = "+@all -@admin -@dangerous"
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]+")


def celery_prefix(prefix: str) -> str:
    """The prefix of the Celery broker's keys and channels (``{p}:celery:``)."""
    return f"{prefix}:{CELERY}:"


def _check_prefix(prefix: str) -> None:
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"state prefix {prefix!r}: only letters, digits and _ . : - "
                         "(it becomes an ACL key pattern)")


def role_rules(role: str, prefix: str = "director", db: int = 0) -> str:
    """The ACL rules of ``role`` (keys, channels, commands) for the deployment under
    ``prefix`` in database ``db``, without user or password."""
    _check_prefix(prefix)
    p = prefix
    read_all = f"%R~{p}:*"
    changes = f"&{p}:changes"
    match role:
        case "api":
            keys = [f"~{p}:*", f"&{p}:*"]
        case "balancer":
            keys = [read_all, f"~{p}:load:region:*", f"~{p}:quota:*", f"~{p}:usage:*",
                    f"~{p}:instances",
                    f"~{p}:throttle:*", f"~{p}:outcomes:*", changes]
        case "worker":
            celery = celery_prefix(p)
            keys = [read_all, f"~{p}:health:*", f"~{p}:load:*", f"~{p}:latency", f"~{p}:beat:*",
                    f"~{p}:instances",
                    f"~{celery}*", changes, f"&{celery}*", f"&{celery}/{db}.celery.pidbox"]
        case "dns":
            keys = [read_all, f"~{p}:instances", f"~{p}:dnssec:misses", changes]
        case _:
            raise ValueError(f"unknown state role {role!r} (roles: {', '.join(ROLES)})")
    return " ".join(["resetkeys", "resetchannels", *keys, "-@all", _COMMANDS])


# The users a replicated set needs besides the roles: replicas log in to their master as
# ``replica``, Sentinels to every server as ``sentinel`` (the commands Redis's Sentinel
# documentation lists for an ACL user of Sentinel's).
REPLICA_RULES = "resetkeys resetchannels -@all +psync +replconf +ping"
SENTINEL_RULES = ("resetkeys allchannels -@all +multi +slaveof +ping +exec +subscribe "
                  "+config|rewrite +role +publish +info +client|setname +client|kill "
                  "+script|kill")


def replication_users(replica_password: str, sentinel_password: str) -> str:
    """The ACL lines of the ``replica`` and ``sentinel`` users of a replicated set."""
    return (f"user replica reset on #{password_digest(replica_password)} {REPLICA_RULES}\n"
            f"user sentinel reset on #{password_digest(sentinel_password)} "
            f"{SENTINEL_RULES}\n")


def password_digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def new_password() -> str:
    """A random password (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def user_line(role: str, passwords: str | list[str], prefix: str = "director",
              db: int = 0) -> str:
    """One ``user`` line of an ACL file; several passwords let a rotation overlap."""
    listed = [passwords] if isinstance(passwords, str) else passwords
    digests = " ".join(f"#{password_digest(p)}" for p in listed)
    return f"user {role} reset on {digests} {role_rules(role, prefix, db)}"


def acl_file(passwords: Mapping[str, str | list[str]], prefix: str = "director",
             db: int = 0) -> str:
    """The text of an ACL file: the ``default`` user off and one user per role given."""
    lines = ["user default reset off"]
    lines += [user_line(role, passwords[role], prefix, db) for role in ROLES
              if role in passwords]
    unknown = sorted(set(passwords) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown state roles {', '.join(unknown)} (roles: {', '.join(ROLES)})")
    return "\n".join(lines) + "\n"
