"""The syntax tree of a policy file: directives with arguments and optional blocks.

The tree keeps everything ``fmt`` needs to print a file back (comments, blank lines, whether
a block was written on one line) and the position of every name and argument, so later
stages can point at the exact word they reject.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.model import SourcePos


@dataclass(frozen=True)
class Arg:
    text: str  # the value; for quoted strings, without quotes and with escapes resolved
    pos: SourcePos
    quoted: bool = False
    width: int = 0  # columns the argument spans in the source (quotes included)


@dataclass
class Comment:
    text: str  # including the leading '#'
    pos: SourcePos


@dataclass
class BlankLine:
    pos: SourcePos


@dataclass
class Directive:
    name: str
    pos: SourcePos
    args: list[Arg] = field(default_factory=list)
    block: list[Item] | None = None
    inline: bool = False  # the block was opened and closed on one line
    trailing_comment: str | None = None  # after the args or after '{'
    close_comment: str | None = None  # after the closing '}'
    block_pos: SourcePos | None = None  # where '{' is

    def directives(self) -> list[Directive]:
        return [item for item in self.block or () if isinstance(item, Directive)]


Item = Directive | Comment | BlankLine


@dataclass
class File:
    name: str
    text: str
    items: list[Item]

    def directives(self) -> list[Directive]:
        return [item for item in self.items if isinstance(item, Directive)]
