"""Parse policy text into a syntax tree, keeping positions, comments and layout.

Grammar (the whole language; what each directive means is in ``policies.grammar``)::

    file      = item* EOF
    item      = NEWLINE | COMMENT | ';' | directive
    directive = WORD arg* ( block | ';' | NEWLINE | COMMENT | EOF | before '}' )
    arg       = WORD | STRING
    block     = '{' item* '}'

The parser recovers at the end of a directive and at braces, so one run reports every
syntax error of a file, not only the first.
"""

from __future__ import annotations

from policies.errors import Diagnostic
from policies.lexer import Kind, Token, tokenize
from policies.syntax import Arg, BlankLine, Comment, Directive, File, Item

_DIRECTIVE_END = (Kind.SEMI, Kind.NEWLINE, Kind.COMMENT, Kind.EOF, Kind.RBRACE)


def parse_text(text: str, filename: str) -> tuple[File, list[Diagnostic]]:
    """Parse one file. Returns the tree (as much as could be read) and its syntax errors."""
    diagnostics: list[Diagnostic] = []
    tokens = list(tokenize(text, filename, diagnostics))
    parser = _Parser(tokens, diagnostics)
    items = parser.parse_items(opener=None)
    return File(filename, text, items), diagnostics


class _Parser:
    def __init__(self, tokens: list[Token], diagnostics: list[Diagnostic]):
        self.tokens = tokens
        self.i = 0
        self.diagnostics = diagnostics

    def peek(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        if token.kind is not Kind.EOF:
            self.i += 1
        return token

    def error(self, token: Token, message: str, expected: str | None = None,
              hint: str | None = None) -> None:
        self.diagnostics.append(
            Diagnostic(token.pos, message, length=token.width, expected=expected, hint=hint)
        )

    def parse_items(self, opener: Directive | None) -> list[Item]:
        """Items up to the matching '}' (consumed) or, at top level, to end of file."""
        items: list[Item] = []
        newlines = 0
        while True:
            token = self.peek()
            if token.kind is Kind.EOF:
                if opener is not None:
                    self.diagnostics.append(
                        Diagnostic(
                            opener.block_pos or opener.pos,
                            f"the block of '{_title(opener)}' is never closed",
                            expected="'}' before the end of the file",
                            hint=f"the block opens on line {opener.pos.line}",
                        )
                    )
                return items
            if token.kind is Kind.RBRACE:
                if opener is not None:
                    return items
                self.advance()
                self.error(token, "unexpected '}': no block is open",
                           hint="remove it, or look for a missing '{' above")
                continue
            if token.kind is Kind.NEWLINE:
                self.advance()
                newlines += 1
                if newlines >= 2 and items and not isinstance(items[-1], BlankLine):
                    items.append(BlankLine(token.pos))
                continue
            newlines = 0
            if token.kind is Kind.SEMI:
                self.advance()
                continue
            if token.kind is Kind.COMMENT:
                self.advance()
                items.append(Comment(token.text, token.pos))
                continue
            if token.kind is Kind.LBRACE:
                self.advance()
                self.error(token, "unexpected '{'", expected="a directive name before '{'")
                self.parse_items(opener=Directive("{", token.pos, block_pos=token.pos))
                self._close_block()
                continue
            if token.kind is Kind.STRING:
                self.advance()
                self.error(token, f"unexpected string \"{token.text}\"",
                           expected="a directive name (a bare word)")
                self._skip_directive()
                continue
            items.append(self.parse_directive())

    def parse_directive(self) -> Directive:
        name = self.advance()
        directive = Directive(name.text, name.pos)
        while self.peek().kind in (Kind.WORD, Kind.STRING):
            token = self.advance()
            directive.args.append(
                Arg(token.text, token.pos, quoted=token.kind is Kind.STRING, width=token.width)
            )
        token = self.peek()
        if token.kind is Kind.LBRACE:
            self.advance()
            directive.block_pos = token.pos
            open_line = token.pos.line
            if self.peek().kind is Kind.COMMENT:
                directive.trailing_comment = self.advance().text
            directive.block = self.parse_items(opener=directive)
            closing = self.peek()
            if closing.kind is Kind.RBRACE:
                directive.inline = closing.pos.line == open_line
            if self._close_block() and self.peek().kind is Kind.COMMENT:
                directive.close_comment = self.advance().text
            return directive
        if token.kind is Kind.COMMENT:
            directive.trailing_comment = self.advance().text
        elif token.kind is Kind.SEMI:
            self.advance()
            if self.peek().kind is Kind.COMMENT:
                directive.trailing_comment = self.advance().text
        return directive

    def _close_block(self) -> bool:
        if self.peek().kind is Kind.RBRACE:
            self.advance()
            return True
        return False

    def _skip_directive(self) -> None:
        while self.peek().kind not in _DIRECTIVE_END:
            if self.peek().kind is Kind.LBRACE:
                token = self.advance()
                self.parse_items(opener=Directive("{", token.pos, block_pos=token.pos))
                self._close_block()
                continue
            self.advance()


def _title(directive: Directive) -> str:
    if directive.args:
        return f"{directive.name} {directive.args[0].text}"
    return directive.name
