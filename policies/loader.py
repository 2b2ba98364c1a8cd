"""Load a policy: parse, compile, validate and prove residency, reporting every problem.

This is the one module of ``policies`` that reads files, through a ``SourceReader`` that
tests and the admin API replace with an in-memory one. Files a policy names without
including them (a JWKS file) must exist when the policy is read from disk.

Checking is bounded work: each file is read and parsed once however often it is included,
the policy's size is capped (``policies.limits``), at most ``MAX_REPORTED`` problems are
listed, and a ``Deadline`` refuses a policy whose check runs past it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from policies.compiler import compile_file
from policies.deadline import Deadline, check
from policies.errors import DeadlineExceeded, Diagnostic, PolicyError
from policies.limits import MAX_REPORTED
from policies.lint import lint
from policies.model import Policy, SourcePos
from policies.parser import parse_text
from policies.reading import FileRef, Reporter
from policies.residency import PathCheck, prove_residency
from policies.syntax import File
from policies.validate import validate
from policies.values import JWKS_EXPECTED

# Test-only: with this set to 1 in the environment, policies load WITHOUT the residency
# proof. It exists so that chaos drills can show that the runtime checks catch a leaky
# policy; `director up --unsafe-skip-residency-proof` sets it for its children.
UNSAFE_SKIP_PROOF_ENV = "DIRECTOR_UNSAFE_SKIP_RESIDENCY_PROOF"


def proof_disabled() -> bool:
    """Whether the test-only switch turned the residency proof off in this process."""
    return os.environ.get(UNSAFE_SKIP_PROOF_ENV) == "1"


# file name -> text, raising OSError when it cannot be read
SourceReader = Callable[[str], str]


def read_file(name: str) -> str:
    with open(name, encoding="utf-8") as handle:
        return handle.read()


@dataclass
class CheckResult:
    policy: Policy | None  # None when any error was found
    diagnostics: list[Diagnostic]
    proof: list[PathCheck] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[Diagnostic] = field(default_factory=list)  # never block loading

    @property
    def ok(self) -> bool:
        return not self.diagnostics

    def error(self) -> PolicyError:
        return PolicyError(self.diagnostics, self.sources)


def check_policy(path: str, *, reader: SourceReader = read_file, prove: bool = True,
                 deadline: Deadline | None = None) -> CheckResult:
    """Parse, compile, validate and (unless ``prove`` is False) prove residency; past
    ``deadline`` the policy is refused with an error saying what was under way."""
    sources: dict[str, str] = {}
    report = Reporter()
    try:
        text = reader(path)
    except (OSError, ValueError) as exc:
        report.at(SourcePos(path, 0, 0), f"cannot read the policy: {_reason(exc)}")
        return CheckResult(None, report.diagnostics, sources=sources)
    sources[path] = text
    try:
        return _check(path, text, reader, prove, deadline, report, sources)
    except DeadlineExceeded as exc:
        report.at(exc.pos or SourcePos(path, 0, 0), str(exc),
                  hint="the policy is too large or too intricate to check in time; the "
                       "running policy stays in force")
        return CheckResult(None, _listed(report.diagnostics), sources=sources)


def _check(path: str, text: str, reader: SourceReader, prove: bool,
           deadline: Deadline | None, report: Reporter, sources: dict[str, str],
           ) -> CheckResult:
    root, syntax = parse_text(text, path)
    report.diagnostics += syntax
    parsed: dict[str, File] = {path: root}

    def include(target: str, from_file: str) -> File | str:
        name = os.path.normpath(os.path.join(os.path.dirname(from_file), target))
        if name in parsed:
            return parsed[name]
        try:
            included = reader(name)
        except (OSError, ValueError) as exc:
            return f"cannot include '{target}': {_reason(exc)}"
        sources[name] = included
        tree, problems = parse_text(included, name)
        report.diagnostics.extend(problems)
        parsed[name] = tree
        return tree

    compiled = compile_file(root, include, report, deadline)
    proof: list[PathCheck] = []
    if compiled.policy is not None:
        check(deadline, "validating")
        validate(compiled.policy, compiled.refs, report)
        if reader is read_file:
            # Only a policy read from disk names files of this machine; one from memory (the
            # admin API, the followers) names files of the machine that wrote it.
            _check_files(compiled.files, report)
        if prove and not report.diagnostics and not proof_disabled():
            check(deadline, "proving residency")
            proof = prove_residency(compiled.policy, report)
    policy = compiled.policy if not report.diagnostics else None
    check(deadline, "linting")
    warnings = lint(policy, report) if policy is not None else []
    return CheckResult(policy, _listed(report.diagnostics), proof, sources, warnings)


def load_policy(path: str, *, reader: SourceReader = read_file, prove: bool = True) -> Policy:
    """The compiled policy at ``path``; raises ``PolicyError`` listing every problem."""
    result = check_policy(path, reader=reader, prove=prove)
    if result.policy is None:
        raise result.error()
    return result.policy


def load_policy_text(text: str, name: str = "policy.dp",
                     files: Mapping[str, str] | None = None, *, prove: bool = True) -> Policy:
    """Like ``load_policy`` but from memory; ``files`` holds included files by path."""
    return load_policy(name, reader=memory_reader({name: text, **(files or {})}), prove=prove)


def memory_reader(contents: Mapping[str, str]) -> SourceReader:
    """A ``SourceReader`` over texts by path (a missing path reads as a missing file)."""

    def reader(path: str) -> str:
        if path not in contents:
            raise FileNotFoundError(2, "No such file or directory", path)
        return contents[path]

    return reader


@dataclass(frozen=True)
class PolicySources:
    """A policy's main file and the files it includes, by paths relative to its folder:
    what ``load_policy_text(text, name, files)`` takes back."""

    name: str
    text: str
    files: dict[str, str]


def read_sources(path: str, *, reader: SourceReader = read_file) -> PolicySources:
    """Read the policy at ``path`` with every file it includes; raises ``PolicyError`` when
    it does not load (the residency proof included)."""
    result = check_policy(path, reader=reader)
    if result.policy is None:
        raise result.error()
    return sources_of(path, result)


def sources_of(path: str, result: CheckResult) -> PolicySources:
    """The sources a check of ``path`` read, as ``PolicySources``."""
    folder = os.path.dirname(path)
    files = {os.path.relpath(name, folder or "."): text
             for name, text in result.sources.items() if name != path}
    return PolicySources(os.path.basename(path), result.sources[path], files)


def _check_files(files: list[FileRef], report: Reporter) -> None:
    for ref in files:
        if os.path.isfile(ref.path):
            continue
        missing = "is a folder, not a file" if os.path.isdir(ref.path) else "does not exist"
        looked = f"looked for {ref.path}" if ref.path != ref.written else None
        report.at(ref.pos, f"the JWKS file '{ref.written}' {missing}", length=ref.width,
                  expected=JWKS_EXPECTED, hint=looked)


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    return str(exc)


def _listed(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Each problem once, the first ``MAX_REPORTED`` by position, then how many more."""
    unique = list(dict.fromkeys(diagnostics))
    if len(unique) <= MAX_REPORTED:
        return unique
    unique.sort(key=lambda d: d.pos)
    listed = unique[:MAX_REPORTED]
    last = listed[-1].pos
    listed.append(Diagnostic(SourcePos(last.file, last.line, last.col + 1),
                             f"... and {len(unique) - MAX_REPORTED} more problems",
                             hint="fix these and check again to see the rest"))
    return listed
