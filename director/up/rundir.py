"""The run directory of ``director up``: logs, tokens, the Valkey data, the control socket and
``up.json`` (where everything is, for ``director drill run`` and other tools)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from director.api.auth import add_token, write_private
from director.up.plan import Bind, ChildSpec
from state.embedded import find_server_binary, server_argv, write_config
from state.ports import free_port


def default_run_dir() -> Path:
    return Path(f"/tmp/director-{os.getuid()}")


@dataclass(frozen=True)
class Tokens:
    admin: str
    read: str


def prepare(run_dir: Path) -> None:
    """Create the layout; a previous run's logs and Valkey data are cleared."""
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for sub in ("logs", "valkey", "credentials"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
        (run_dir / sub).mkdir(mode=0o700)
    (run_dir / "policy").mkdir(mode=0o700, exist_ok=True)
    (run_dir / "control.sock").unlink(missing_ok=True)


def issue_tokens(run_dir: Path) -> Tokens:
    """Fresh admin and read tokens: plaintext in ``admin.token`` / ``read.token`` (0600),
    only their SHA-256 in ``tokens.json`` (what the API reads)."""
    tokens_file = run_dir / "tokens.json"
    tokens_file.unlink(missing_ok=True)
    tokens = Tokens(admin=add_token(tokens_file, "up-admin", "admin"),
                    read=add_token(tokens_file, "up-read", "read"))
    write_private(run_dir / "admin.token", tokens.admin + "\n")
    write_private(run_dir / "read.token", tokens.read + "\n")
    return tokens


def valkey_child(run_dir: Path, acl: str) -> tuple[ChildSpec, str]:
    """The embedded Valkey as a supervised child, with an append-only file so that a
    restart after a kill (a drill) comes back with the state it had, and the users of
    ``acl`` (``director.up.credentials``) in a configuration file of mode 0600."""
    port = free_port()
    config = write_config(run_dir / "valkey" / "users.conf", acl)
    argv = tuple(server_argv(find_server_binary(), config, "127.0.0.1", port,
                             run_dir / "valkey", appendonly=True))
    url = f"redis://127.0.0.1:{port}/0"
    return ChildSpec("valkey", "valkey", argv, address=url, ready_tcp=("127.0.0.1", port),
                     binds=(Bind("tcp", "127.0.0.1", port),)), url


def write_manifest(run_dir: Path, manifest: dict[str, object]) -> None:
    path = run_dir / "up.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n")
