"""``director state credentials``: the shared state's users, one per role (``state.acl``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from director.console import plain_console

app = typer.Typer(help="The shared state (Redis / Valkey).", no_args_is_help=True)
err = plain_console(stderr=True)


@app.command()
def credentials(
    out: Annotated[Path, typer.Argument(help="Directory for the password files and "
                                        "users.acl.")],
    prefix: Annotated[str, typer.Option("--prefix", help="Key prefix of the deployment "
                                        "(--state-prefix of its processes).")] = "director",
    db: Annotated[int, typer.Option("--db", help="Database number of the state URLs.")] = 0,
    rotate: Annotated[list[str] | None, typer.Option(
        "--rotate", help="Draw a new password for ROLE (repeatable); the old one stays valid "
        "in users.acl until --drop-previous.")] = None,
    drop_previous: Annotated[bool, typer.Option(
        "--drop-previous", help="End a rotation: users.acl keeps only the current "
        "passwords.")] = False,
) -> None:
    """Make a random password for every role that has none (OUT/<role>.password, mode 0600:
    api, balancer, worker, dns) and write OUT/users.acl for the server's --aclfile (the
    default user off, each role's key and channel patterns, SHA-256 digests only). Existing
    passwords are kept, so running it again changes nothing."""
    from state.acl import ROLES, acl_file, new_password
    from state.private_file import write_private

    unknown = sorted(set(rotate or ()) - set(ROLES))
    if unknown:
        err.print(f"error: --rotate: unknown role {', '.join(unknown)} (roles: "
                  f"{', '.join(ROLES)})", markup=False)
        raise typer.Exit(2)
    passwords: dict[str, str | list[str]] = {}
    for role in ROLES:
        current, previous = out / f"{role}.password", out / f"{role}.previous"
        if role in (rotate or ()) and current.exists():
            write_private(previous, current.read_text(encoding="utf-8"))
        if not current.exists() or role in (rotate or ()):
            write_private(current, new_password() + "\n")
            err.print(f"{current}: new password for {role}", markup=False)
        if drop_previous:
            previous.unlink(missing_ok=True)
        listed = [current.read_text(encoding="utf-8").strip()]
        if previous.exists():
            listed.append(previous.read_text(encoding="utf-8").strip())
        passwords[role] = listed
    try:
        text = acl_file(passwords, prefix, db)
    except ValueError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    acl = out / "users.acl"
    write_private(acl, text)
    acl.chmod(0o644)  # digests only: the server's user must read it
    err.print(f"{acl}: {len(ROLES)} users, the default user off (reload: ACL LOAD)",
              markup=False)
