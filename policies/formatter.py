"""Canonical formatting of a policy file (``director policy fmt``).

Rules: four spaces per block level; one directive per line, its arguments separated by one
space; strings re-quoted; comments kept where they were, two spaces before a trailing one;
at most one blank line in a row and none at the start or end of a block. A block written on
one line stays on one line when it holds only simple directives and fits in 100 columns.
Formatting is idempotent and never changes what the policy means.
"""

from __future__ import annotations

from policies.errors import PolicyError
from policies.lexer import quote
from policies.parser import parse_text
from policies.syntax import Arg, BlankLine, Comment, Directive, Item

INDENT = "    "
WIDTH = 100


def format_text(text: str, filename: str = "policy.dp") -> str:
    """The canonical form of ``text``; raises ``PolicyError`` on syntax errors."""
    tree, diagnostics = parse_text(text, filename)
    if diagnostics:
        raise PolicyError(diagnostics, {filename: text})
    lines = _items(tree.items, depth=0)
    return "\n".join(lines).rstrip("\n") + "\n" if lines else ""


def _items(items: list[Item], depth: int) -> list[str]:
    out: list[str] = []
    run: list[tuple[str, str]] = []  # consecutive one-line directives with trailing comments

    def flush() -> None:
        width = max((len(code) for code, _ in run), default=0)
        out.extend(f"{code.ljust(width)}  {comment}" for code, comment in run)
        run.clear()

    for index, item in enumerate(items):
        if isinstance(item, BlankLine):
            flush()
            at_edge = not out or index == len(items) - 1
            if not at_edge and out[-1] != "":
                out.append("")
            continue
        if isinstance(item, Comment):
            flush()
            out.append(INDENT * depth + item.text.rstrip())
            continue
        lines = _directive(item, depth)
        if len(lines) == 1 and isinstance(lines[0], tuple):
            run.append(lines[0])
            continue
        flush()
        out += [line if isinstance(line, str) else f"{line[0]}  {line[1]}" for line in lines]
    flush()
    while out and out[-1] == "":
        out.pop()
    return out


def _head(directive: Directive) -> str:
    return " ".join([directive.name, *(_arg(arg) for arg in directive.args)])


def _arg(arg: Arg) -> str:
    needs_quotes = arg.quoted or not arg.text or any(c in arg.text for c in ' \t{};#"')
    return quote(arg.text) if needs_quotes else arg.text


def _with_comment(line: str, comment: str | None) -> str:
    return f"{line}  {comment.rstrip()}" if comment else line


def _directive(directive: Directive, depth: int) -> list[str | tuple[str, str]]:
    """Lines of a directive; a one-line directive with a comment is (code, comment), so
    that comments on consecutive lines can be aligned."""
    pad = INDENT * depth
    head = _head(directive)
    if directive.block is None:
        if directive.trailing_comment:
            return [(pad + head, directive.trailing_comment.rstrip())]
        return [pad + head]
    if directive.inline and _simple(directive.block):
        body = "; ".join(_head(child) for child in directive.directives())
        line = f"{pad}{head} {{ {body} }}" if body else f"{pad}{head} {{}}"
        if len(line) <= WIDTH and not directive.trailing_comment:
            if directive.close_comment:
                return [(line, directive.close_comment.rstrip())]
            return [line]
    opening = _with_comment(f"{pad}{head} {{", directive.trailing_comment)
    lines: list[str | tuple[str, str]] = [opening]
    lines += _items(directive.block, depth + 1)
    lines.append(_with_comment(pad + "}", directive.close_comment))
    return lines


def _simple(block: list[Item]) -> bool:
    return all(
        isinstance(item, Directive) and item.block is None and not item.trailing_comment
        for item in block
    )
