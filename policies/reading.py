"""Helpers the compiler uses to read blocks and arguments, reporting problems with positions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from policies.errors import Diagnostic, did_you_mean, one_of
from policies.grammar import CONTEXTS, TOP, Spec
from policies.limits import MAX_REPORTED
from policies.model import SourcePos
from policies.syntax import Arg, Directive
from policies.values import ValueProblem

T = TypeVar("T")


@dataclass(frozen=True)
class Ref:
    """A name used somewhere that must be declared elsewhere (checked by the validator)."""

    kind: str  # "region", "healthcheck", "jurisdiction"
    name: str
    pos: SourcePos
    width: int
    context: str  # e.g. "service chat.infer.example.com"


@dataclass(frozen=True)
class FileRef:
    """A file the policy names (a JWKS file): as written, and resolved against the folder
    of the file that names it. The loader checks that it exists when it reads from disk."""

    written: str
    path: str
    pos: SourcePos
    width: int


class Reporter:
    """Collects diagnostics; every stage appends to the same list."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        # every directive read, by position: later stages see only the model (which keeps
        # a directive's position) and use this to point at the exact word they reject
        self.directives: dict[SourcePos, Directive] = {}
        self._by_pos: dict[SourcePos, list[Diagnostic]] = {}
        self._indexed = 0  # diagnostics indexed in _by_pos (stages also append directly)

    @property
    def full(self) -> bool:
        """Whether more problems were found than are listed (``limits.MAX_REPORTED``):
        costly hints are no longer worth working out."""
        return len(self.diagnostics) > MAX_REPORTED

    def reported_at(self, pos: SourcePos) -> list[Diagnostic]:
        """The diagnostics reported at ``pos`` so far (indexed as they come, so that a
        stage asking about each directive stays linear)."""
        for diagnostic in self.diagnostics[self._indexed:]:
            self._by_pos.setdefault(diagnostic.pos, []).append(diagnostic)
        self._indexed = len(self.diagnostics)
        return self._by_pos.get(pos, [])

    def at(self, pos: SourcePos, message: str, *, length: int = 1,
           expected: str | None = None, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(pos, message, length, expected, hint))

    def at_arg(self, arg: Arg, message: str, *, expected: str | None = None,
               hint: str | None = None) -> None:
        self.at(arg.pos, message, length=arg.width, expected=expected, hint=hint)

    def at_name(self, pos: SourcePos, message: str, *, words: Sequence[str] = (),
                child: str | None = None, expected: str | None = None,
                hint: str | None = None) -> None:
        """Report at a word of the directive at ``pos`` (a model object's position).

        With ``child``, look in that directive of its block instead (``priority`` in a
        service). Point at the first argument in ``words`` if there is one, else at the
        directive's first argument (its name) when no ``words`` were asked for, else at
        the directive's own name."""
        directive = self.directives.get(pos)
        if directive is None:
            self.at(pos, message, expected=expected, hint=hint)
            return
        if child is not None:
            directive = next((d for d in directive.directives() if d.name == child), directive)
        arg = next((a for a in directive.args if a.text in words), None)
        if arg is None and not words and directive.args:
            arg = directive.args[0]
        if arg is None:
            self.at_directive(directive, message, expected=expected, hint=hint)
        else:
            self.at_arg(arg, message, expected=expected, hint=hint)

    def at_directive(self, directive: Directive, message: str, *,
                     expected: str | None = None, hint: str | None = None) -> None:
        self.at(directive.pos, message, length=len(directive.name), expected=expected, hint=hint)


def describe(directive: Directive) -> str:
    if directive.args:
        return f"{directive.name} {directive.args[0].text}"
    return directive.name


def read_block(
    directives: Sequence[Directive], context: str, owner: Directive | None,
    report: Reporter,
) -> dict[str, list[Directive]]:
    """Check a block's directives against the grammar; return the usable ones by name."""
    specs = CONTEXTS[context]
    found: dict[str, list[Directive]] = {}
    for directive in directives:
        report.directives[directive.pos] = directive
        spec = specs.get(directive.name)
        if spec is None:
            _unknown(directive, context, specs, report)
            continue
        earlier = found.get(directive.name)
        if earlier and not spec.repeat:
            first = earlier[0].pos
            first_at = f"line {first.line}" if first.file == directive.pos.file else str(first)
            report.at_directive(
                directive, f"'{directive.name}' is set twice {_in_block(context, 'this')}",
                hint=f"the first one is on {first_at}; keep one",
            )
            continue
        if not _shape_ok(directive, spec, report):
            continue
        found.setdefault(directive.name, []).append(directive)
    for name, spec in specs.items():
        if spec.required and name not in found and not _reported_near(name, directives, report):
            where = owner.block_pos or owner.pos if owner is not None else None
            subject = f"{context} '{owner.args[0].text}'" if owner and owner.args else context
            usage = f"{name} {spec.usage}".strip()
            if where is None or owner is None:
                if not directives:
                    continue  # an empty policy is reported once, by the compiler
                opening = directives[0]
                if spec.block is not None:
                    usage += " { ... }"
                report.at_directive(opening, f"the policy has no '{name}'", expected=usage)
            else:
                report.at(owner.pos, f"{subject} is missing '{name}'",
                          length=len(owner.name), expected=usage)
    return found


def _reported_near(name: str, directives: Sequence[Directive], report: Reporter) -> bool:
    # A misspelt required directive was already reported as unknown, with a hint naming it;
    # do not also call it missing.
    return any(
        diag.hint and f"'{name}'" in diag.hint
        for d in directives for diag in report.reported_at(d.pos)
    )


def _unknown(directive: Directive, context: str, specs: dict[str, Spec], report: Reporter) -> None:
    # A directive of another block is far more likely misplaced than misspelt.
    if report.full:  # one of very many: no hint (a did-you-mean costs a string match each)
        report.at_directive(directive, f"unknown directive '{directive.name}' "
                            f"{_in_block(context, 'a')}")
        return
    homes = [ctx for ctx, table in CONTEXTS.items() if directive.name in table]
    if homes:
        places = [_in_block(ctx, "a") for ctx in homes]
        hint: str | None = f"'{directive.name}' belongs {_either(places)}"
    else:
        hint = did_you_mean(directive.name, specs)
    report.at_directive(
        directive, f"unknown directive '{directive.name}' {_in_block(context, 'a')}",
        expected=one_of(specs), hint=hint,
    )


def _in_block(context: str, article: str) -> str:
    if context == TOP:
        return "at the top level of the policy"
    if article == "a" and (context[0] in "aeiou" or context == "soa"):
        article = "an"
    return f"in {article} {context} block"


def _either(places: list[str]) -> str:
    if len(places) <= 2:
        return " or ".join(places)
    return ", ".join(places[:-1]) + " or " + places[-1]


def _shape_ok(directive: Directive, spec: Spec, report: Reporter) -> bool:
    if spec.block is not None and directive.block is None:
        report.at_directive(directive, f"'{directive.name}' needs a block",
                            expected=f"{directive.name} {spec.usage} {{ ... }}".replace("  ", " "))
        return False
    if spec.block is None and directive.block is not None:
        report.at(directive.block_pos or directive.pos, f"'{directive.name}' takes no block",
                  expected=f"{directive.name} {spec.usage}".strip())
        return False
    return True


class Args:
    """A cursor over one directive's arguments."""

    def __init__(self, directive: Directive, report: Reporter):
        self.directive = directive
        self.report = report
        self.index = 0
        self.ok = True

    @property
    def remaining(self) -> list[Arg]:
        return self.directive.args[self.index:]

    def peek(self) -> str | None:
        args = self.directive.args
        return args[self.index].text if self.index < len(args) else None

    def take(self, convert: Callable[[str], T], usage: str) -> T | None:
        """The next argument converted, or None (reported) when missing or invalid."""
        args = self.directive.args
        if self.index >= len(args):
            self._missing(usage)
            return None
        arg = args[self.index]
        self.index += 1
        return self.convert(arg, convert)

    def take_arg(self, usage: str) -> Arg | None:
        args = self.directive.args
        if self.index >= len(args):
            self._missing(usage)
            return None
        self.index += 1
        return args[self.index - 1]

    def expect(self, keyword: str, usage: str) -> bool:
        """Take the next argument, which must be ``keyword``; False (reported) if not."""
        arg = self.take_arg(usage)
        if arg is None:
            return False
        if arg.text != keyword:
            self.ok = False
            self.report.at_arg(arg, f"expected '{keyword}', got '{arg.text}'",
                               expected=f"{self.directive.name} {usage}")
            return False
        return True

    def rest(self, convert: Callable[[str], T], usage: str,
             minimum: int = 1) -> list[tuple[T, Arg]]:
        """All remaining arguments converted; invalid ones are reported and left out."""
        out: list[tuple[T, Arg]] = []
        if len(self.remaining) < minimum:
            self._missing(usage)
        for arg in self.remaining:
            value = self.convert(arg, convert)
            if value is not None:
                out.append((value, arg))
        self.index = len(self.directive.args)
        return out

    def convert(self, arg: Arg, convert: Callable[[str], T]) -> T | None:
        try:
            return convert(arg.text)
        except ValueProblem as problem:
            self.ok = False
            self.report.at_arg(arg, problem.message, expected=problem.expected,
                               hint=problem.hint)
            return None

    def end(self, usage: str) -> bool:
        """Report arguments left over; True when there were none."""
        extra = self.remaining
        if extra:
            self.ok = False
            self.report.at_arg(
                extra[0], f"unexpected argument '{extra[0].text}' to '{self.directive.name}'",
                expected=f"{self.directive.name} {usage}".strip(),
            )
            self.index = len(self.directive.args)
            return False
        return True

    def _missing(self, usage: str) -> None:
        self.ok = False
        directive = self.directive
        after = directive.args[-1] if directive.args else None
        if after is not None:
            pos = SourcePos(after.pos.file, after.pos.line, after.pos.col + after.width)
        else:
            pos = SourcePos(directive.pos.file, directive.pos.line,
                            directive.pos.col + len(directive.name))
        self.report.at(pos, f"'{directive.name}' is missing an argument",
                       expected=f"{directive.name} {usage}".strip())


def single(directive: Directive | None, convert: Callable[[str], T], usage: str,
           report: Reporter, default):
    """The one argument of ``directive`` converted, or ``default`` when there is no directive
    or its argument is missing or invalid (reported)."""
    if directive is None:
        return default
    args = Args(directive, report)
    value = args.take(convert, usage)
    args.end(usage)
    return default if value is None else value


E = TypeVar("E", bound=Enum)


def keyword(directive: Directive, enum_type: type[E], report: Reporter) -> E | None:
    """The one argument of ``directive`` as a member of ``enum_type`` (by value), or None
    (reported, with the choices and a did-you-mean hint)."""
    choices = [member.value for member in enum_type]
    usage = " | ".join(choices)

    def convert(text: str) -> E:
        if text not in choices:
            raise ValueProblem(f"unknown value '{text}' for '{directive.name}'",
                               expected=one_of(choices), hint=did_you_mean(text, choices))
        return enum_type(text)

    return single(directive, convert, usage, report, None)
