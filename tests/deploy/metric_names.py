"""The Prometheus metric names the code really defines, read from its sources.

Every ``Counter``/``Gauge``/``Histogram``/``Summary`` (prometheus_client's metric classes) and
``*MetricFamily`` (custom collectors) call under director/, regions/, workers/ and state/
whose name is a string literal, or a loop variable over a literal tuple of names, names one
family; so does every name in the simulator's per-engine table
(``regions.simulator.metrics.ENGINE_METRICS``). The sample names a scrape shows follow from
the type: counters ``_total`` (and ``_created``), histograms ``_bucket``/``_sum``/``_count``,
etc.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from regions.simulator.metrics import ENGINE_METRICS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("director", "regions", "workers", "state")
TYPES = {
    "Counter": "counter", "CounterMetricFamily": "counter",
    "Gauge": "gauge", "GaugeMetricFamily": "gauge",
    "Histogram": "histogram", "HistogramMetricFamily": "histogram",
    "TimingsCollector": "histogram",  # routing.timings: the routing plugins' run times
    "Summary": "summary", "SummaryMetricFamily": "summary",
    "Info": "info", "InfoMetricFamily": "info",
    "Enum": "stateset", "StateSetMetricFamily": "stateset",
}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
}
# A metric name in PromQL or prose: ours start with director_, the GPU servers' with vllm:.
NAME_IN_TEXT = re.compile(r"(?<![\w:.-])(director_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def _called_type(node: ast.Call) -> str | None:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return TYPES.get(name or "")


def _loop_names(tree: ast.AST, parents: dict[ast.AST, ast.AST], call: ast.Call,
                variable: str) -> list[str]:
    """Names bound to ``variable`` by an enclosing ``for variable, ... in ((\"n\", ...), ...)``."""
    node = parents.get(call)
    while node is not None and not isinstance(node, ast.For):
        node = parents.get(node)
    if node is None or not isinstance(node.iter, ast.Tuple | ast.List):
        return []
    target = node.target
    first = target.elts[0] if isinstance(target, ast.Tuple) else target
    if not (isinstance(first, ast.Name) and first.id == variable):
        return []
    names = []
    for item in node.iter.elts:
        head = item.elts[0] if isinstance(item, ast.Tuple | ast.List) else item
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            names.append(head.value)
    return names


def _families_in(path: Path) -> Iterator[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (kind := _called_type(node)) is None:
            continue
        first = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "name"), None)
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield first.value, kind
        elif isinstance(first, ast.Name):
            for name in _loop_names(tree, parents, node, first.id):
                yield name, kind


@functools.cache
def defined_families() -> dict[str, str]:
    """Family name (without ``_total``) -> type, for every metric the code defines."""
    families = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name, kind in _families_in(path):
                if kind == "counter" and name.endswith("_total"):
                    name = name.removesuffix("_total")
                families[name] = kind
    for names in ENGINE_METRICS.values():  # the simulator's per-engine table
        families.update(names.families())
    return families


@functools.cache
def exported_samples() -> frozenset[str]:
    """Every sample name a scrape of the code's metrics can show."""
    return frozenset(name + suffix for name, kind in defined_families().items()
                     for suffix in SUFFIXES[kind])


def names_in(text: str) -> set[str]:
    """Metric names (ours and vLLM's) mentioned in a PromQL expression or a document."""
    return set(NAME_IN_TEXT.findall(text))
