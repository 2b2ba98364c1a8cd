# SPDX-License-Identifier: Apache-2.0
"""A small schema language over YAML nodes that keeps every node's position.

The loader composes the file with ``yaml.compose`` (nodes keep their start and end marks),
then reads it with specs built from ``Obj``, ``ListOf``, ``MapOf``, ``Str``, ``Num``,
``Bool``, ``Duration``, ``Multiplier`` and ``Either``. Each problem becomes a ``Diagnostic``
at the offending node's line and column, with the path (``load.cohorts[1].share``) in the
message; reading goes on after an error, so one run reports every problem. ``Reader.marks``
keeps each path's position for the semantic checks that follow.

``${name}`` in a scalar is replaced by the drill's ``vars`` (a scalar that is only a
reference takes the variable's type); ``${env:NAME}`` reads the environment.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from drills.errors import Diagnostic, did_you_mean
from policies.model import SourcePos
from policies.values import compound_seconds

INVALID: Any = object()  # a value that failed to read (already reported)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|env:[A-Za-z_][A-Za-z0-9_]*)\}")
_KIND = {ScalarNode: "a scalar", SequenceNode: "a list", MappingNode: "a mapping"}


def path_text(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"


@dataclass
class Reader:
    """Reads nodes against specs, collecting diagnostics and the marks of every path."""

    file: str
    variables: Mapping[str, Any] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    marks: dict[tuple[str | int, ...], tuple[int, int, int]] = field(default_factory=dict)
    nodes: dict[tuple[str | int, ...], Node] = field(default_factory=dict)

    def mark(self, path: tuple[str | int, ...], node: Node) -> None:
        self.nodes[path] = node
        start, end = node.start_mark, node.end_mark
        length = end.column - start.column if end.line == start.line else 1
        self.marks[path] = (start.line + 1, start.column + 1, max(1, length))

    def error(self, path: tuple[str | int, ...], message: str, hint: str | None = None,
              *, node: Node | None = None) -> None:
        if node is not None:
            self.mark(path, node)
        line, col, length = self._position(path)
        where = path_text(path)
        self.diagnostics.append(Diagnostic(SourcePos(self.file, line, col),
                                           f"{where}: {message}", length, hint=hint))

    def _position(self, path: tuple[str | int, ...]) -> tuple[int, int, int]:
        probe = path
        while probe:
            if probe in self.marks:
                return self.marks[probe]
            probe = probe[:-1]
        return self.marks.get((), (1, 1, 1))

    def scalar(self, node: ScalarNode, path: tuple[str | int, ...]) -> Any:
        """The Python value of a scalar node, with ``${var}`` references substituted."""
        text = node.value
        if node.style is None and _VAR.search(text) is None:
            try:
                return SafeConstructor().construct_object(node)
            except ConstructorError as exc:
                self.error(path, f"invalid value {text!r}: {exc.problem}", node=node)
                return INVALID
        if _VAR.search(text) is None:
            return text
        whole = _VAR.fullmatch(text)
        if whole:
            return self._variable(whole.group(1), path, node)
        parts = []
        last = 0
        for m in _VAR.finditer(text):
            value = self._variable(m.group(1), path, node)
            if value is INVALID:
                return INVALID
            parts.append(text[last:m.start()] + str(value))
            last = m.end()
        return "".join(parts) + text[last:]

    def _variable(self, name: str, path: tuple[str | int, ...], node: Node) -> Any:
        if name.startswith("env:"):
            value = os.environ.get(name[4:])
            if value is None:
                self.error(path, f"environment variable {name[4:]} is not set", node=node)
                return INVALID
            return value
        if name not in self.variables:
            self.error(path, f"unknown variable '{name}'",
                       did_you_mean(name, self.variables) or "declare it under vars:",
                       node=node)
            return INVALID
        return self.variables[name]


class Spec:
    """Reads one node; returns the value or ``INVALID`` after reporting."""

    expected = "a value"

    def read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        r.mark(path, node)
        return self._read(node, path, r)

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        raise NotImplementedError

    def _wrong(self, node: Node, path: tuple[str | int, ...], r: Reader,
               got: Any = None, hint: str | None = None) -> Any:
        what = _KIND[type(node)] if got is None else repr(got)
        r.error(path, f"expected {self.expected}, got {what}", hint)
        return INVALID

    def _value(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        if not isinstance(node, ScalarNode):
            return self._wrong(node, path, r)
        return r.scalar(node, path)


class Str(Spec):
    def __init__(self, choices: tuple[str, ...] | None = None, pattern: str | None = None,
                 expected: str | None = None) -> None:
        self.choices = choices
        self.pattern = re.compile(pattern) if pattern else None
        self.expected = expected or (
            "one of " + ", ".join(choices) if choices else "a string")

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        if value is None or isinstance(value, list | dict):
            return self._wrong(node, path, r, value)
        value = str(value)
        if self.choices is not None and value not in self.choices:
            return self._wrong(node, path, r, value, did_you_mean(value, self.choices))
        if self.pattern is not None and not self.pattern.fullmatch(value):
            return self._wrong(node, path, r, value)
        return value


class Num(Spec):
    def __init__(self, lo: float | None = None, hi: float | None = None,
                 integer: bool = False, lo_open: bool = False) -> None:
        self.lo, self.hi, self.integer, self.lo_open = lo, hi, integer, lo_open
        kind = "an integer" if integer else "a number"
        bounds: list[str] = []
        if lo is not None and lo == hi:
            self.expected = f"exactly {lo:g}"
            return
        if lo is not None:
            bounds.append(f"{'>' if lo_open else '>='} {lo:g}")
        if hi is not None:
            bounds.append(f"<= {hi:g}")
        self.expected = kind + (" " + " and ".join(bounds) if bounds else "")

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        if isinstance(value, str):
            try:
                value = float(value) if not self.integer else int(value)
            except ValueError:
                return self._wrong(node, path, r, value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return self._wrong(node, path, r, value)
        if self.integer and (isinstance(value, float) and not value.is_integer()):
            return self._wrong(node, path, r, value)
        if isinstance(value, float) and not math.isfinite(value):
            return self._wrong(node, path, r, value)
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return self._wrong(node, path, r, value)
        if self.hi is not None and value > self.hi:
            return self._wrong(node, path, r, value)
        return int(value) if self.integer else float(value)


class Bool(Spec):
    expected = "true or false"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        if not isinstance(value, bool):
            return self._wrong(node, path, r, value)
        return value


def parse_duration(value: Any) -> float | None:
    """``30`` / ``"30s"`` / ``"1m 30s"`` / ``"500ms"`` / ``"2h"`` -> seconds; None if invalid.
    Text follows the policy language's duration grammar (``policies.values.duration``),
    spaces between terms allowed; a bare YAML number is seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str):
        return None
    return compound_seconds("".join(value.split()))


class Duration(Spec):
    def __init__(self, lo: float = 0.0, hi: float | None = None, positive: bool = False):
        self.lo, self.hi, self.positive = lo, hi, positive
        bound = " > 0" if positive else ""
        if hi is not None:
            bound += f" and at most {hi:g}s"
        self.expected = f"a duration like 30s, 2m or 500ms{bound}"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        seconds = parse_duration(value)
        if seconds is None or seconds < self.lo or (self.positive and seconds <= 0) \
                or (self.hi is not None and seconds > self.hi):
            return self._wrong(node, path, r, value)
        return seconds


class Multiplier(Spec):
    """``8x`` (of the baseline) -> ("x", 8.0); a bare number -> ("rps", value)."""

    expected = "a multiplier like 8x, or a rate in requests per second"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        if isinstance(value, str) and value.strip().lower().endswith("x"):
            try:
                factor = float(value.strip()[:-1])
            except ValueError:
                return self._wrong(node, path, r, value)
            if not math.isfinite(factor) or factor < 0:
                return self._wrong(node, path, r, value)
            return ("x", factor)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                or not math.isfinite(value):
            return self._wrong(node, path, r, value)
        return ("rps", float(value))


class ListOf(Spec):
    def __init__(self, item: Spec, min_len: int = 0, max_len: int | None = None,
                 scalar_ok: bool = False) -> None:
        self.item, self.min_len, self.max_len, self.scalar_ok = item, min_len, max_len, scalar_ok
        self.expected = f"a list of {item.expected}"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        if isinstance(node, ScalarNode) and self.scalar_ok and node.value not in ("", "~"):
            value = self.item.read(node, (*path, 0), r)
            return INVALID if value is INVALID else [value]
        if not isinstance(node, SequenceNode):
            return self._wrong(node, path, r)
        if len(node.value) < self.min_len:
            r.error(path, f"expected at least {self.min_len} item(s), got {len(node.value)}")
            return INVALID
        if self.max_len is not None and len(node.value) > self.max_len:
            r.error(path, f"expected at most {self.max_len} items, got {len(node.value)}")
            return INVALID
        out = [self.item.read(child, (*path, i), r) for i, child in enumerate(node.value)]
        return INVALID if any(v is INVALID for v in out) else out


def _keys(node: MappingNode, path: tuple[str | int, ...], r: Reader) -> list[tuple[str, Node]]:
    seen: set[str] = set()
    out = []
    for key, value in node.value:
        if not isinstance(key, ScalarNode):
            r.error(path, "mapping keys must be plain names", node=key)
            continue
        name = key.value
        if name in seen:
            r.error((*path, name), f"duplicate key '{name}'", node=key)
            continue
        seen.add(name)
        r.mark((*path, name), key)
        out.append((name, value))
    return out


class MapOf(Spec):
    """A mapping of free names to values of one spec."""

    def __init__(self, item: Spec, key_pattern: str = r"[A-Za-z0-9_.:/*-]+") -> None:
        self.item = item
        self.key_pattern = re.compile(key_pattern)
        self.expected = f"a mapping of names to {item.expected}"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        if not isinstance(node, MappingNode):
            return self._wrong(node, path, r)
        out: dict[str, Any] = {}
        bad = False
        for name, child in _keys(node, path, r):
            if not self.key_pattern.fullmatch(name):
                r.error((*path, name), f"invalid name {name!r}")
                bad = True
                continue
            value = self.item.read(child, (*path, name), r)
            bad |= value is INVALID
            out[name] = value
        return INVALID if bad else out


@dataclass(frozen=True)
class Field:
    spec: Spec
    required: bool = False
    default: Any = None
    hint: str | None = None


class Obj(Spec):
    """A mapping with known keys; unknown keys are errors (with a did-you-mean hint)."""

    def __init__(self, fields: Mapping[str, Field], expected: str = "a mapping",
                 extra: Callable[[str], bool] | None = None) -> None:
        self.fields = dict(fields)
        self.expected = expected
        self.extra = extra

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        if not isinstance(node, MappingNode):
            return self._wrong(node, path, r)
        out: dict[str, Any] = {}
        bad = False
        for name, child in _keys(node, path, r):
            spec = self.fields.get(name)
            if spec is None:
                if self.extra is not None and self.extra(name):
                    out[name] = AnyValue().read(child, (*path, name), r)
                    continue
                r.error((*path, name), f"unknown key '{name}'",
                        did_you_mean(name, self.fields) or
                        "expected one of: " + ", ".join(self.fields))
                bad = True
                continue
            value = spec.spec.read(child, (*path, name), r)
            bad |= value is INVALID
            out[name] = value
        for name, spec in self.fields.items():
            if name in out:
                continue
            if spec.required:
                r.error(path, f"missing required key '{name}'", spec.hint)
                bad = True
            elif isinstance(spec.spec, Obj) and spec.default == {}:
                out[name] = spec.spec.defaults()
            else:
                out[name] = spec.default
        return INVALID if bad else out

    def defaults(self) -> dict[str, Any]:
        """The value of an empty mapping: every field's default (nested blocks filled)."""
        return {name: f.spec.defaults() if isinstance(f.spec, Obj) and f.default == {}
                else f.default for name, f in self.fields.items()}


class AnyValue(Spec):
    """Any YAML value, as plain Python (variables substituted)."""

    expected = "a value"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        if isinstance(node, ScalarNode):
            return r.scalar(node, path)
        if isinstance(node, SequenceNode):
            return [self.read(c, (*path, i), r) for i, c in enumerate(node.value)]
        assert isinstance(node, MappingNode)  # the three kinds of YAML node
        return {k: self.read(v, (*path, k), r) for k, v in _keys(node, path, r)}


class Either(Spec):
    """A scalar read one way, a mapping another (e.g. ``start: 20s`` or ``{phase, plus}``)."""

    def __init__(self, scalar: Spec | None = None, mapping: Spec | None = None,
                 sequence: Spec | None = None) -> None:
        self.scalar, self.mapping, self.sequence = scalar, mapping, sequence
        self.expected = " or ".join(s.expected for s in (scalar, mapping, sequence) if s)

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        spec = {ScalarNode: self.scalar, MappingNode: self.mapping,
                SequenceNode: self.sequence}[type(node)]
        if spec is None:
            return self._wrong(node, path, r)
        return spec.read(node, path, r)


def compose(text: str, file: str) -> tuple[Node | None, list[Diagnostic]]:
    """Compose YAML text into a node tree; a syntax error becomes a positioned Diagnostic."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader), []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = f"invalid YAML: {exc.problem or exc.context}"
        hint = exc.context if exc.problem and exc.context else None
        return None, [Diagnostic(SourcePos(file, line, col), message, hint=hint)]
    except yaml.YAMLError as exc:
        return None, [Diagnostic(SourcePos(file, 1, 1), f"invalid YAML: {exc}")]


class ScalarOnly(Spec):
    """A plain scalar (a string, number or boolean), as in ``vars``."""

    expected = "a scalar (string, number or boolean)"

    def _read(self, node: Node, path: tuple[str | int, ...], r: Reader) -> Any:
        value = self._value(node, path, r)
        if value is INVALID:
            return INVALID
        if value is None:
            return self._wrong(node, path, r, value)
        return value
