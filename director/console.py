"""The one way the CLI makes a rich ``Console``: one that prints user text as it is.

Rich's defaults rewrite text: ``:100:`` becomes an emoji and numbers, paths and addresses
get colours. Policy diagnostics are ``file:line:col`` and sample answers are addresses, so
every console that can print user text turns emoji codes and highlighting off.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console


def plain_console(*, stderr: bool = False, **options: Any) -> Console:
    """A console that never replaces ``:code:`` with emoji nor highlights numbers."""
    options.setdefault("soft_wrap", True)
    return Console(stderr=stderr, emoji=False, highlight=False, **options)
