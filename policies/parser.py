"""Parse policy text into a syntax tree, keeping positions, comments and layout.

Grammar (the whole language; what each directive means is in ``policies.grammar``)::

    file      = item* EOF
    item      = NEWLINE | COMMENT | ';' | directive
    directive = WORD arg* ( block | ';' | NEWLINE | COMMENT | EOF | before '}' )
    arg       = WORD | STRING
    block     = '{' item* '}'

The parser recovers at the end of a directive and at braces, so one run reports every
syntax error of a file, not only the first. A block left open at the end of the file is
closed where the indentation says it ends (the first line indented no deeper than the line
that opened it), so the directives after it are read where the author meant them to be.
"""

from __future__ import annotations

from policies.errors import Diagnostic
from policies.lexer import Kind, Token, quote, tokenize
from policies.syntax import Arg, BlankLine, Comment, Directive, File, Item

_DIRECTIVE_END = (Kind.SEMI, Kind.NEWLINE, Kind.COMMENT, Kind.EOF, Kind.RBRACE)
MAX_DEPTH = 16  # blocks nested deeper than this are skipped (the language needs four)


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
        self.depth = 0
        # the last '}' indented deeper than the line that opened its block: (line, block)
        self.early_close: tuple[int, str] | None = None
        # items an unclosed block handed back to the block around it (see _unclosed)
        self.dedented: list[Item] = []
        # column of the first token of each line, to find where an unclosed block ends
        self.indent: dict[int, int] = {}
        for token in tokens:
            if token.kind not in (Kind.NEWLINE, Kind.EOF):
                self.indent.setdefault(token.pos.line, token.pos.col)

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
                    return self._unclosed(opener, items)
                return items
            if token.kind is Kind.RBRACE:
                if opener is not None:
                    return items
                self.advance()
                hint = "remove it, or look for a missing '{' above"
                if self.early_close is not None:
                    line, title = self.early_close
                    hint = (f"the '}}' on line {line} closes '{title}' although it is indented "
                            "as if inside it: one of the two '}' is too many")
                self.error(token, "unexpected '}': no block is open", hint=hint)
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
                self.error(token, "unexpected '{'", expected="a directive name before '{'",
                           hint="a block belongs to a directive: 'name args { ... }'")
                self._skip_block(token)
                continue
            if token.kind is Kind.STRING:
                if not _is_word(token.text):
                    self.advance()
                    self.error(token, f"unexpected string {quote(token.text)}",
                               expected="a directive name (a bare word)")
                    self._skip_directive()
                    continue
                # Read it as the directive it names, so that later stages do not also
                # report that directive missing.
                self.error(token, f"unexpected string {quote(token.text)}",
                           expected="a directive name (a bare word)",
                           hint=f"write it without quotes: {token.text}")
            items.append(self.parse_directive())
            items += self.dedented
            self.dedented = []

    def parse_directive(self) -> Directive:
        name = self.advance()
        directive = Directive(name.text, name.pos)
        while self.peek().kind in (Kind.WORD, Kind.STRING):
            token = self.advance()
            directive.args.append(
                Arg(token.text, token.pos, quoted=token.kind is Kind.STRING, width=token.width)
            )
        token = self.peek()
        if token.kind is Kind.LBRACE and self.depth >= MAX_DEPTH:
            self.advance()
            self.error(token, "blocks are nested too deeply",
                       expected=f"at most {MAX_DEPTH} levels of blocks")
            self._skip_block(token)
            return directive
        if token.kind is Kind.LBRACE:
            self.advance()
            directive.block_pos = token.pos
            open_line = token.pos.line
            if self.peek().kind is Kind.COMMENT:
                directive.trailing_comment = self.advance().text
            self.depth += 1
            directive.block = self.parse_items(opener=directive)
            self.depth -= 1
            closing = self.peek()
            if closing.kind is Kind.RBRACE:
                directive.inline = closing.pos.line == open_line
                alone = self.indent.get(closing.pos.line) == closing.pos.col
                if alone and closing.pos.col > self.indent.get(directive.pos.line, 1):
                    self.early_close = (closing.pos.line, _title(directive))
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
            token = self.advance()
            if token.kind is Kind.LBRACE:
                self._skip_block(token)

    def _skip_block(self, opening: Token) -> None:
        """Skip to the '}' matching ``opening`` (already consumed), without recursion."""
        depth = 1
        while True:
            token = self.advance()
            if token.kind is Kind.EOF:
                self.error(opening, "this '{' is never closed",
                           expected="'}' before the end of the file")
                return
            if token.kind is Kind.LBRACE:
                depth += 1
            elif token.kind is Kind.RBRACE:
                depth -= 1
                if depth == 0:
                    return

    def _unclosed(self, opener: Directive, items: list[Item]) -> list[Item]:
        """Report a block still open at the end of the file and close it where its
        indentation ends: items from there on go back to the enclosing block."""
        start = self.indent.get(opener.pos.line, opener.pos.col)
        cut = next(
            (k for k, item in enumerate(items)
             if not isinstance(item, BlankLine) and item.pos.line > opener.pos.line
             and self.indent.get(item.pos.line) == item.pos.col and item.pos.col <= start),
            len(items),
        )
        if cut == 0:
            cut = len(items)  # the block is not indented at all: indentation tells nothing
        if cut < len(items):
            line = items[cut].pos.line
            hint = f"indentation suggests a '}}' is missing before line {line}"
            self.dedented = items[cut:] + self.dedented
            items = items[:cut]
            while items and isinstance(items[-1], BlankLine):
                items.pop()
        else:
            hint = None
        self.diagnostics.append(
            Diagnostic(
                opener.block_pos or opener.pos,
                f"the block of '{_title(opener)}' is never closed",
                length=1,
                expected="'}' before the end of the file",
                hint=hint,
            )
        )
        return items


def _is_word(text: str) -> bool:
    return bool(text) and not any(ch in _NOT_IN_WORD or ch.isspace() for ch in text)


_NOT_IN_WORD = set('{};#"')


def _title(directive: Directive) -> str:
    if directive.args:
        return f"{directive.name} {directive.args[0].text}"
    return directive.name
