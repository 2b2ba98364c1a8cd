"""The shared state's users in the deployment files: Redis runs with an ACL file, every
component logs in as its role's user (state.acl) with a password from a file mounted from
that role's secret only, no URL on a command line carries a password, and the ACL file
`director state credentials` makes (which the READMEs tell the operator to load) has those
users and loads in a real server that then refuses a client without credentials."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
from cli_check import sites_of
from deploy_files import (
    SYSTEMD_DIR,
    CommandSite,
    compose_commands,
    compose_services,
    k8s_commands,
    k8s_containers,
    systemd_unit,
)
from typer.testing import CliRunner

from director.cli import app
from state.acl import ROLES
from state.credentials import PASSWORD_FILE_ENV, USER_ENV, PasswordFile
from state.embedded import find_server_binary, server_argv, write_config
from state.errors import StateError
from state.ports import free_port
from state.store import StateStore

COMMANDS = {("dns", "serve"): "dns", ("api", "serve"): "api", ("workers",): "worker",
            ("region", "serve"): "balancer"}


def with_roles(sites: list[CommandSite]) -> list[tuple[CommandSite, str]]:
    return [(site, role) for path, role in COMMANDS.items() for site in sites_of(sites, *path)]


DEPLOYED = with_roles([*compose_commands(), *k8s_commands()])


def mounted_from(site: CommandSite, path: str) -> str | None:
    """The compose volume or Kubernetes secret the directory of ``path`` is mounted from."""
    folder = str(PurePosixPath(path).parent)
    where, _, name = site.where.partition(":")
    if where == "compose":
        for volume in compose_services()[name].get("volumes") or []:
            source, target, *_ = str(volume).split(":")
            if target == folder:
                return source
        return None
    deployment_name, container_name = name.split("/")
    for deployment, container in k8s_containers():
        if (deployment["metadata"]["name"], container["name"]) != (deployment_name,
                                                                    container_name):
            continue
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        volume = volumes.get(mounts.get(folder, ""), {})
        return (volume.get("secret") or {}).get("secretName") or \
            ("emptyDir" if "emptyDir" in volume else None)
    return None


@pytest.mark.parametrize(("site", "role"), DEPLOYED,
                         ids=[f"{s.where}:{r}" for s, r in DEPLOYED])
def test_every_component_logs_in_as_its_role(site: CommandSite, role: str) -> None:
    url = site.option("--redis") or site.env.get("DIRECTOR_REDIS_URL")
    assert url, f"{site.where}: no state URL"
    assert urlsplit(url).password is None, f"{site.where}: a password on the command line"
    assert site.env.get(USER_ENV) == role, site.where
    password_file = site.env.get(PASSWORD_FILE_ENV)
    assert password_file, f"{site.where}: no {PASSWORD_FILE_ENV}"
    assert mounted_from(site, password_file) in (f"redis-{role}", f"director-redis-{role}"), \
        f"{site.where}: {password_file} is not mounted from the {role} credentials"
    if role == "balancer":  # its key table outlives the process
        state_dir = site.env.get("DIRECTOR_BALANCER_STATE_DIR")
        assert state_dir and mounted_from(site, state_dir + "/x") is not None, site.where


def test_redis_runs_with_the_acl_file() -> None:
    redis = compose_services()["redis"]
    assert "--aclfile" in redis["command"]
    acl = redis["command"][redis["command"].index("--aclfile") + 1]
    assert any(str(v).split(":")[:2] == ["redis-acl", str(PurePosixPath(acl).parent)]
               for v in redis["volumes"])
    (deployment, container), = [(d, c) for d, c in k8s_containers() if c["name"] == "redis"]
    command = container["command"]
    assert "--aclfile" in command
    folder = str(PurePosixPath(command[command.index("--aclfile") + 1]).parent)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts[folder]]["secret"]["secretName"] == "director-redis-acl"


@pytest.mark.parametrize("unit", ["director-dns.service", "director-api.service",
                                  "director-workers.service", "director-balancer@.service"])
def test_systemd_units_log_in_as_their_role(unit: str) -> None:
    role = {"dns": "dns", "api": "api", "workers": "worker", "balancer@": "balancer"}[
        unit.removeprefix("director-").removesuffix(".service")]
    service = systemd_unit(SYSTEMD_DIR / unit)["Service"]
    values = {key: [v for k, v in service if k == key] for key, _ in service}
    assert f"redis-password:/etc/director/redis/{role}.password" in values["LoadCredential"]
    assert any(f"{USER_ENV}={role}" in line and f"{PASSWORD_FILE_ENV}=%d/redis-password"
               in line for line in values["Environment"])


def test_the_generated_acl_file_has_every_deployed_user_and_a_server_loads_it(
        tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["state", "credentials", str(tmp_path)])
    assert result.exit_code == 0, result.output
    acl = (tmp_path / "users.acl").read_text()
    users = [line.split()[1] for line in acl.splitlines()]
    assert users == ["default", *ROLES] and "user default reset off" in acl
    assert {role for _, role in DEPLOYED} <= set(users)
    assert not any((tmp_path / f"{r}.password").read_text().strip() in acl for r in ROLES)
    port = free_port()
    config = write_config(tmp_path / "server.conf", f"aclfile {tmp_path / 'users.acl'}\n")
    data = tmp_path / "data"
    data.mkdir()
    server = subprocess.Popen(server_argv(find_server_binary(), config, "127.0.0.1", port,
                                          data), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        address = f"redis://127.0.0.1:{port}/0"
        for role in ROLES:
            store = StateStore.from_url(address, credentials=PasswordFile(
                role, tmp_path / f"{role}.password"))
            for _ in range(100):  # until the server listens
                try:
                    store.ping()
                    break
                except StateError:
                    time.sleep(0.05)
            assert store.client.acl_whoami() in (role, role.encode())
            store.close()
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(100).startswith(b"-NOAUTH")
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()
