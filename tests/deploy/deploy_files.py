"""Readers of the deployment files in deploy/: compose, Kubernetes, systemd, Prometheus,
Grafana. Each returns plain data (dicts, argv tuples) for the tests to cross-check against
the code; nothing here knows what the code accepts (see cli_check.py, metric_names.py)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
COMPOSE_POLICY = COMPOSE_DIR / "policy" / "global.dp"
K8S_DIR = DEPLOY / "kubernetes"
K8S_MANIFESTS = K8S_DIR / "manifests"
SYSTEMD_DIR = DEPLOY / "systemd"
PROMETHEUS_DIR = DEPLOY / "prometheus"
GRAFANA_DASHBOARD = DEPLOY / "grafana" / "director-dashboard.json"
OPERATOR_GUIDE = ROOT / "docs" / "operator-guide.md"
SHELL_OPERATORS = {";", "&&", "||", "|", "&", "(", ")"}
REDIRECTIONS = {">", ">>", "<", "2>", "2>>", "&>"}


@dataclass(frozen=True)
class CommandSite:
    """One command line found in a deployment file: where it is, its argv, its environment."""

    where: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        """The value of the last ``name VALUE`` (or ``name=VALUE``) in argv, or None."""
        value = None
        for i, token in enumerate(self.argv):
            if token == name and i + 1 < len(self.argv):
                value = self.argv[i + 1]
            elif token.startswith(name + "="):
                value = token.split("=", 1)[1]
        return value

    def options(self, name: str) -> list[str]:
        return [self.argv[i + 1] for i, t in enumerate(self.argv[:-1]) if t == name]


def yaml_documents(path: Path) -> list[Any]:
    """Every non-empty YAML document of ``path`` (a leading comment-only one is dropped)."""
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


def json_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.json"))


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def port_of(address: str) -> int:
    """'0.0.0.0:8080', '[::]:53', 'http://host:8000' or 'host:8000' -> the port."""
    tail = address.rsplit(":", 1)[1]
    return int(re.match(r"\d+", tail).group(0))


def split_commands(text: str) -> list[list[str]]:
    """A shell command line -> its simple commands, redirections removed."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token in SHELL_OPERATORS:
            commands.append([])
        elif token in REDIRECTIONS:
            skip_next = True
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def expand_shell(argv: list[str], where: str, env: Mapping[str, str]) -> list[CommandSite]:
    """``sh -c SCRIPT`` -> the script's simple commands; any other argv as it is."""
    if len(argv) >= 3 and Path(argv[0]).name in ("sh", "bash") and argv[1] == "-c":
        return [CommandSite(where, tuple(c), env) for c in split_commands(argv[2])]
    return [CommandSite(where, tuple(argv), env)]


# -- compose ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    (document,) = yaml_documents(COMPOSE_FILE)
    return document


def compose_services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def compose_argv(service: Mapping[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(t) for t in command]


def compose_commands() -> list[CommandSite]:
    sites = []
    for name, service in compose_services().items():
        argv = compose_argv(service)
        if argv:
            env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
            sites += expand_shell(argv, f"compose:{name}", env)
    return sites


def compose_container_ports(service: Mapping[str, Any]) -> set[tuple[int, str]]:
    """(container port, protocol) of every ``ports`` entry: '127.0.0.1:5353:53/udp'."""
    found = set()
    for entry in service.get("ports") or []:
        spec, _, proto = str(entry).partition("/")
        found.add((int(spec.rsplit(":", 1)[-1]), proto or "tcp"))
    return found


# -- Kubernetes ---------------------------------------------------------------------------


def k8s_manifest_files() -> list[Path]:
    return sorted(K8S_MANIFESTS.glob("*.yaml"))


def k8s_objects() -> list[dict[str, Any]]:
    return [doc for path in k8s_manifest_files() for doc in yaml_documents(path)]


def k8s_kind(kind: str) -> list[dict[str, Any]]:
    return [obj for obj in k8s_objects() if obj["kind"] == kind]


def k8s_containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for deployment in k8s_kind("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield deployment, container


def k8s_commands() -> list[CommandSite]:
    sites = []
    for deployment, container in k8s_containers():
        argv = [str(t) for t in (container.get("command") or []) + (container.get("args") or [])]
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}
        where = f"k8s:{deployment['metadata']['name']}/{container['name']}"
        sites += expand_shell(argv, where, env)
    return sites


def k8s_policy_files(target: Path) -> Path:
    """Write the policy ConfigMap's files under ``target`` as the Deployments mount them
    (volume items map keys to paths); returns the main file."""
    (configmap,) = [c for c in k8s_kind("ConfigMap") if c["metadata"]["name"] == "director-policy"]
    deployment = next(d for d in k8s_kind("Deployment") if d["metadata"]["name"] == "dns")
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"]
                  if v.get("configMap", {}).get("name") == "director-policy")
    for item in volume["configMap"]["items"]:
        path = target / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]], encoding="utf-8")
    return target / "global.dp"


# -- systemd ------------------------------------------------------------------------------


def systemd_units() -> list[Path]:
    return sorted(SYSTEMD_DIR.glob("*.service"))


def systemd_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file -> (key, value) pairs in order (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        else:
            key, _, value = line.partition("=")
            if current is None:
                raise ValueError(f"{path.name}: {line!r} outside a section")
            current.append((key.strip(), value.strip()))
    return sections


def env_file(path: Path) -> dict[str, str]:
    values = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def systemd_env_files() -> list[Path]:
    return sorted(SYSTEMD_DIR.glob("*.env"))


def systemd_instance(unit: Path) -> str:
    """A plausible instance name for a template unit: a region, or a simulated GPU."""
    if unit.name == "director-sim@.service":
        return "use1-h100-a"
    return "eu-west"


def systemd_env(unit: Path) -> dict[str, str]:
    """The environment the example env files give ``unit``."""
    env: dict[str, str] = {}
    instance = systemd_instance(unit)
    for key, value in systemd_unit(unit)["Service"]:
        if key == "EnvironmentFile":
            name = Path(value.lstrip("-").replace("%i", instance)).name
            candidates = [SYSTEMD_DIR / name, SYSTEMD_DIR / f"sim-{name}"]
            for candidate in candidates:
                if candidate.exists():
                    env.update(env_file(candidate))
    return env


def expand_exec(line: str, env: Mapping[str, str], instance: str) -> list[str]:
    """An ExecStart line as systemd runs it: %i, ${VAR} (one word), $VAR (split in words)."""
    argv = []
    for word in shlex.split(line.replace("%i", instance)):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            argv += env.get(word[1:], "").split()
        else:
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                               lambda m: env.get(m.group(1), m.group(0)), word))
    return argv


def systemd_commands() -> list[CommandSite]:
    sites = []
    for unit in systemd_units():
        env = systemd_env(unit)
        for key, value in systemd_unit(unit)["Service"]:
            if key == "ExecStart":
                argv = expand_exec(value, env, systemd_instance(unit))
                sites.append(CommandSite(f"systemd:{unit.name}", tuple(argv), env))
    return sites


def exec_variables(unit: Path) -> set[str]:
    """Environment variables an ExecStart line of ``unit`` refers to."""
    names = set()
    for key, value in systemd_unit(unit)["Service"]:
        if key == "ExecStart":
            names |= set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value))
    return names


# -- documentation --------------------------------------------------------------------------


def markdown_files() -> list[Path]:
    return [OPERATOR_GUIDE, *sorted(DEPLOY.rglob("README.md"))]


def doc_commands(path: Path) -> list[CommandSite]:
    """Commands of the ``sh``/``bash``/``console`` code blocks of a Markdown file (lines
    joined at trailing backslashes, prompts and comments removed)."""
    sites = []
    text = path.read_text(encoding="utf-8")
    for block in re.findall(r"```(?:sh|bash|shell|console)\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if not line or line.startswith("#"):
                continue
            for command in split_commands(line.split(" #", 1)[0]):
                sites.append(CommandSite(f"{path.relative_to(ROOT)}: {line[:60]}",
                                         tuple(command)))
    return sites


# -- Prometheus -----------------------------------------------------------------------------


def scrape_configs(name: str) -> dict[str, dict[str, Any]]:
    (config,) = yaml_documents(PROMETHEUS_DIR / name)
    return {job["job_name"]: job for job in config["scrape_configs"]}


def static_targets(job: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(host:port, labels) of every static target of a scrape job."""
    return [(target, dict(group.get("labels") or {}))
            for group in job.get("static_configs") or [] for target in group["targets"]]
