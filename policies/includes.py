"""Splice included files into the blocks that include them, within the policy's budget.

``include "file"`` stands for the directives of that file, at the top level or inside a
``region`` block. Within one block a file is spliced once: a second ``include`` of it there,
directly or through another file, adds nothing, so includes that share files (a DAG) cost
one copy of each file per block instead of one per path (a chain of files each including
the next twice would otherwise double at each step). A file that includes itself, directly
or through others, is an error naming the chain.

Every directive counts against ``limits.MAX_DIRECTIVES``, with the contents of its block,
wherever it is spliced; the first directive over the budget is reported and nothing after it
is read. The compiler never touches the file system: ``IncludeLoader`` reads and parses.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.deadline import Deadline, check
from policies.limits import MAX_DIRECTIVES
from policies.reading import Args, Reporter
from policies.syntax import Directive, File

# Given the include's argument and the including file's name: the parsed file, or an error
# message (reported at the include directive).
IncludeLoader = Callable[[str, str], "File | str"]


class Splicer:
    """Expands the includes of one policy, counting its directives as they are read."""

    def __init__(self, include: IncludeLoader, report: Reporter,
                 deadline: Deadline | None = None, budget: int | None = None) -> None:
        self._include = include
        self._report = report
        self._deadline = deadline
        self._budget = MAX_DIRECTIVES if budget is None else budget
        self.used = 0
        self.over = False  # the budget ran out: the rest of the policy is not read
        self._reported: set = set()  # positions of diagnostics, kept up to date
        self._seen_reports = 0

    def top(self, root: File) -> list[Directive]:
        """The top level of the policy, its includes spliced; counts every directive."""
        return self._splice(root.directives(), (root.name,), set(), count=True)

    def block(self, directive: Directive) -> list[Directive]:
        """The block of ``directive`` (a region) with its includes spliced; its own
        directives were counted with it at the top level, the spliced ones are counted."""
        if self.over:  # nothing more is spliced: its own directives were counted
            return [d for d in directive.directives() if d.name != "include"]
        return self._splice(directive.directives(), (directive.pos.file,), set(), count=False)

    def _splice(self, directives: list[Directive], stack: tuple[str, ...], seen: set[str],
                *, count: bool) -> list[Directive]:
        out: list[Directive] = []
        for directive in directives:
            if self.over or (count and not self._spend(directive)):
                break
            if directive.name != "include":
                out.append(directive)
                continue
            loaded = self._load(directive)
            if loaded is None:
                continue
            arg = directive.args[0]
            if loaded.name in stack:
                self._report.at_arg(arg, f"'{arg.text}' includes itself",
                                    hint="include chain: " + " -> ".join((*stack, loaded.name)))
                continue
            if loaded.name in seen:
                continue  # already spliced into this block
            seen.add(loaded.name)
            out += self._splice(loaded.directives(), (*stack, loaded.name), seen, count=True)
        return out

    def _load(self, directive: Directive) -> File | None:
        """The file an ``include`` names, or None (reported)."""
        report = self._report
        args = Args(directive, report)
        arg = args.take_arg('"<file>"')
        if arg is None or not args.end('"<file>"') or directive.block is not None:
            if directive.block is not None:
                report.at(directive.block_pos or directive.pos, "'include' takes no block",
                          expected='include "<file>"')
            return None
        if self._already_reported(arg.pos):
            return None  # e.g. an unterminated string: already reported, do not guess a file
        loaded = self._include(arg.text, directive.pos.file)
        check(self._deadline, f"reading '{arg.text}'", arg.pos)
        if isinstance(loaded, str):
            report.at_arg(arg, loaded, expected="a policy file, relative to this one")
            return None
        return loaded

    def _already_reported(self, pos: object) -> bool:
        diagnostics = self._report.diagnostics
        self._reported.update(d.pos for d in diagnostics[self._seen_reports:])
        self._seen_reports = len(diagnostics)
        return pos in self._reported

    def _spend(self, directive: Directive) -> bool:
        """Count ``directive`` and its block; False (reported once) past the budget."""
        self.used += _weight(directive)
        if self.used <= self._budget:
            return True
        self.over = True
        self._report.at_directive(
            directive, f"the policy has more than {self._budget} directives",
            expected=f"at most {self._budget} directives, blocks' contents included",
            hint="an included file counts again wherever it is spliced; split the policy "
                 "or share less of it through includes")
        return False


def _weight(directive: Directive) -> int:
    """The directive and every directive of its block, however deep."""
    total, pending = 0, [directive]
    while pending:
        current = pending.pop()
        total += 1
        pending += current.directives()
    return total
