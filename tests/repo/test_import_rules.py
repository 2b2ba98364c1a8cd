# SPDX-License-Identifier: Apache-2.0
"""The package map's import rules (``docs/architecture.md``), read from the source with
``ast``: every import counts, also those inside functions and under ``TYPE_CHECKING``.

- ``policies``, ``engines``, ``telemetry`` and the routing core (``routing``) import no
  other package of ours; ``state`` only ``policies``; ``tenants`` only ``policies`` and ``state``;
- a tier (``regions``, ``workers``) imports the shared packages, never another tier, except
  the one policy gate every loaded policy passes (``director.policy_gate``); the drills (a
  client of the whole system) import the shared packages and three global-tier helpers;
- the benchmarks' library (``benchkit``) may import every package of the product, and no
  package of the product imports it;
- in the global tier, only the command line (``director.commands``) composes the others;
- no import cycle between modules;
- the regional balancer's wings import downwards only: ``scheduling`` (none of the others),
  ``http`` (``scheduling``), ``tenancy`` (``http``, ``scheduling``), ``signals`` (all
  three); of the modules beside them, ``types`` and ``errors`` import no wing, the others
  (the composition root: ``app`` and what it builds with) import them all;
- importing the regional balancer or the workers loads no module of the global tier (the
  decision engine, the GeoIP reader), checked in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packages import PACKAGES, ROOT

SHARED = {"engines", "policies", "routing", "state", "telemetry", "tenants"}
ALLOWED: dict[str, set[str]] = {
    "policies": set(),
    "telemetry": set(),
    "engines": set(),
    "routing": set(),
    "state": {"policies"},
    "tenants": {"policies", "state"},
    "regions": SHARED - {"regions"},
    "workers": set(SHARED),
    "drills": {"policies", "state"},
    "director": SHARED | {"drills", "regions", "workers"},
    "benchkit": SHARED | {"director", "drills", "regions", "workers"},
}
# (importing package, imported module): why
EXCEPTIONS = {
    ("workers", "director.policy_gate"): "the gate every loaded policy passes, imported lazily",
    ("drills", "director.geo"): "cohorts of clients placed by the DNS tier's own GeoIP reader",
    ("drills", "director.datasets"): "where the repository's traces are",
    ("drills", "director.console"): "the command line's console",
}
COMPOSERS = ("director.commands",)  # the only global-tier modules that import the others
COMPOSED = {"drills", "regions", "workers"}
BALANCER = "regions.balancer"
# wing: the wings it may import
WINGS: dict[str, set[str]] = {
    "scheduling": set(),
    "http": {"scheduling"},
    "tenancy": {"http", "scheduling"},
    "signals": {"http", "scheduling", "tenancy"},
    "adapters": {"http", "scheduling", "signals"},
    "degrade": {"http", "scheduling", "signals", "tenancy"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


MODULES = modules()


def resolve(name: str) -> str | None:
    """The module of ours that ``name`` (a module or a name in one) is, if any."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports(module: str) -> Iterator[tuple[int, str]]:
    """(line, module of ours) for every import in ``module``, wherever it is."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = resolve(name)
            if target is not None and target != module:
                yield node.lineno, target


GRAPH = {module: sorted({target for _, target in imports(module)}) for module in MODULES}


def test_the_rules_see_every_package() -> None:
    assert set(ALLOWED) == set(PACKAGES)  # a new package needs its rule
    assert {m.split(".")[0] for m in MODULES} == set(PACKAGES)
    assert len(MODULES) > 100
    assert "state.aio" in GRAPH["regions.balancer.signals.shared_state"]  # lazy ones too:
    assert "director.policy_gate" in GRAPH["workers.policy_source"]


def test_packages_import_only_what_the_map_allows() -> None:
    broken = []
    for module in MODULES:
        source = module.split(".")[0]
        for line, target in imports(module):
            top = target.split(".")[0]
            if top == source or top in ALLOWED[source]:
                continue
            if any(source == s and (target == t or target.startswith(t + "."))
                   for s, t in EXCEPTIONS):
                continue
            broken.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not broken, "\n".join(broken)


def test_no_package_of_the_product_may_import_the_benchmarks() -> None:
    assert [p for p, allowed in ALLOWED.items() if "benchkit" in allowed] == []
    assert [t for _, t in EXCEPTIONS if t.split(".")[0] == "benchkit"] == []


def test_only_the_command_line_composes_the_tiers() -> None:
    broken = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
        for module in MODULES
        if module.startswith("director") and not module.startswith(COMPOSERS)
        for line, target in imports(module)
        if target.split(".")[0] in COMPOSED
    ]
    assert not broken, "\n".join(broken)


LEAVES = {f"{BALANCER}.errors", f"{BALANCER}.types"}  # beside the wings, importing none


def wing(module: str) -> str | None:
    """The balancer wing of ``module`` (None: not in the balancer), ``""`` for a leaf
    beside the wings, ``"root"`` for the composition root."""
    if not module.startswith(BALANCER + "."):
        return None
    part = module.split(".")[2]
    return part if part in WINGS else "" if module in LEAVES else "root"


def test_the_balancer_has_its_wings() -> None:
    found = {wing(m) for m in MODULES if m.startswith(BALANCER + ".")}
    assert found == {*WINGS, "root", ""}
    assert {m for m in MODULES if wing(m) == ""} == LEAVES


def test_the_balancer_wings_import_downwards() -> None:
    broken = []
    for module in MODULES:
        source = wing(module)
        if source is None or source == "root":
            continue
        allowed = WINGS.get(source, set())
        for line, target in imports(module):
            into = wing(target)
            if into in (None, "", source) or into in allowed:
                continue
            broken.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not broken, "\n".join(broken)


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycles_finds_a_cycle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["b"], "b": []}) == []


def test_no_import_cycle_between_modules() -> None:
    found = cycles(GRAPH)
    assert not found, found


@pytest.mark.parametrize("entry", ["regions.balancer", "regions.balancer.app", "workers.tasks",
                                   "state", "policies", "engines"])
def test_a_tier_loads_nothing_of_the_global_tier(entry: str) -> None:
    code = (
        f"import sys, {entry}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('director', 'geoip2', 'maxminddb', 'matplotlib', 'fastapi'))\n"
        "print(' '.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stdout.strip() == "", f"import {entry} loaded: {out.stdout.strip()}"
