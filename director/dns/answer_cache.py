"""The DNS answer cache: every finished answer the fast path keeps, in one place, bounded
in entries and in bytes.

Three tables, read directly by the hot path (plain dicts: a lookup is one ``dict.get``):

- ``udp`` and ``tcp``: the query less its ID -> (the response less its ID, metrics slot),
  or for answers that depend on the resolver's address, a dict of those by address;
- ``templates``: the parsed-query key -> ``Template`` (``fastpath``).

Writes go through ``put``, ``put_template`` and ``forget``, which keep ``entries`` and
``bytes`` (what the entries hold, plus what Python spends on each: measured with
tracemalloc, see tests/dns/test_dns_answer_cache.py). Past either bound the oldest quarter
of each table is dropped (dicts keep insertion order): a quarter of the answers is asked
again, not all of them at once as when a cache starts over. A new generation of
answers is the cache's ``successor`` (new answer tables, the same templates, which render
a decision class whatever the state); a reader on another thread holding the old tables
keeps reading consistent (if stale, then dropped) answers.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

MAX_ENTRIES = 250_000
MAX_BYTES = 48 << 20
# Python's own bytes per entry beyond the key's and answer's lengths (dict slot, bytes
# and tuple headers); a per-resolver entry adds its inner dict and the address string.
ENTRY_OVERHEAD = 176
HOST_OVERHEAD = 290
TEMPLATE_OVERHEAD = 450

Entry = tuple[bytes, int]


class AnswerCache:
    """Finished answers of one generation, bounded by ``max_entries`` and ``max_bytes``."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.udp: dict[bytes, Any] = {}
        self.tcp: dict[bytes, Any] = {}
        self.templates: dict[tuple, Any] = {}
        self.entries = 0
        self.bytes = 0
        self.template_bytes = 0  # the templates' share of ``bytes``
        self.evicted = 0  # entries dropped to stay within the bounds

    def successor(self) -> AnswerCache:
        """An empty cache with the same bounds for a new generation of answers, keeping
        the templates: each renders one decision class, whatever the state."""
        cache = AnswerCache(self.max_entries, self.max_bytes)
        cache.templates = self.templates
        cache.entries = len(self.templates)
        cache.bytes = cache.template_bytes = self.template_bytes
        return cache

    def put(self, table: dict[bytes, Any], query: bytes, entry: Entry,
            host: str | None = None) -> None:
        """Keep ``entry`` for ``query`` in ``table`` (``udp`` or ``tcp``), for the resolver
        ``host`` alone when given."""
        cost = _cost(query, entry, host)
        if self.entries >= self.max_entries or self.bytes + cost > self.max_bytes:
            self._evict(cost)
        if host is None:
            old = table.get(query)
            if old is not None:
                self._release(query, old)
            table[query] = entry
        else:
            per_host = table.get(query)
            if per_host is None or per_host.__class__ is not dict:
                if per_host is not None:
                    self._release(query, per_host)
                table[query] = per_host = {}
            old = per_host.get(host)
            if old is not None:
                self.entries -= 1
                self.bytes -= _cost(query, old, host)
            per_host[host] = entry
        self.entries += 1
        self.bytes += cost

    def forget(self, table: dict[bytes, Any], query: bytes) -> None:
        """Drop what ``table`` holds for ``query`` (for every resolver)."""
        value = table.pop(query, None)
        if value is not None:
            self._release(query, value)

    def put_template(self, key: tuple, template: Any) -> None:
        """Keep ``template`` under ``key`` (whose first item is the query name)."""
        cost = _template_cost(key, template)
        if self.entries >= self.max_entries or self.bytes + cost > self.max_bytes:
            self._evict(cost)
        old = self.templates.pop(key, None)
        if old is not None:
            self.entries -= 1
            self.bytes -= _template_cost(key, old)
            self.template_bytes -= _template_cost(key, old)
        self.templates[key] = template
        self.entries += 1
        self.bytes += cost
        self.template_bytes += cost

    def _release(self, query: bytes, value: Any) -> None:
        if value.__class__ is dict:
            for host, entry in value.items():
                self.entries -= 1
                self.bytes -= _cost(query, entry, host)
        else:
            self.entries -= 1
            self.bytes -= _cost(query, value, None)

    def _evict(self, room: int) -> None:
        """Drop the oldest quarter of each table, again until ``room`` bytes fit."""
        while self.entries and (self.entries >= self.max_entries
                                or self.bytes + room > self.max_bytes):
            before = self.entries
            for table in (self.udp, self.tcp):
                for query in list(islice(table, len(table) // 4 + 1)):
                    self._release(query, table.pop(query))
            for key in list(islice(self.templates, len(self.templates) // 4 + 1)):
                cost = _template_cost(key, self.templates.pop(key))
                self.entries -= 1
                self.bytes -= cost
                self.template_bytes -= cost
            self.evicted += before - self.entries


def _cost(query: bytes, entry: Entry, host: str | None) -> int:
    cost = ENTRY_OVERHEAD + len(query) + len(entry[0])
    if host is not None:
        cost += HOST_OVERHEAD + len(host)
    return cost


def _template_cost(key: tuple, template: Any) -> int:
    return TEMPLATE_OVERHEAD + len(key[0]) + len(template.header) + len(template.tail)
