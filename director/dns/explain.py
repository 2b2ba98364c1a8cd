"""``_explain.<service>`` TXT answers: the decision chain for the querying client.

One TXT record whose strings are, in order: a summary line, then one line per step
(``stage plugin: kept [...]; dropped {...}; note``), then ``correlation <id>``: what the
spans of this client network's DNS decisions and HTTP requests carry
(``telemetry.correlation``). Lines longer than 255 octets are split
across consecutive strings (TXT character-strings hold at most 255).
"""

from __future__ import annotations

import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.rrset

from director.engine.types import Decision

MAX_STRING = 255


def explain_lines(decision: Decision, scope: int,
                  correlation: str | None = None) -> list[str]:
    """The explain chain of ``decision`` as text lines (the last: the client network's
    correlation id, ``telemetry.correlation``, when given)."""
    regions = ",".join(decision.regions) or "(nothing)"
    rules = ",".join(decision.rules) or "none"
    lines = [f"service {decision.service}: answer {regions}; reason {decision.reason}; "
             f"rules {rules}; ttl {decision.ttl:g}; ecs scope /{scope}"]
    for step in decision.steps:
        parts = [f"{step.stage} {step.plugin}: kept [{', '.join(step.kept)}]"]
        if step.dropped:
            parts.append("dropped {" + ", ".join(f"{k}: {v}" for k, v in step.dropped.items())
                         + "}")
        if step.note:
            parts.append(step.note)
        lines.append("; ".join(parts))
    if correlation is not None:
        lines.append(f"correlation {correlation}")
    return lines


def split_strings(lines: list[str]) -> list[bytes]:
    """UTF-8 encode each line and cut it into character-strings of at most 255 octets."""
    strings: list[bytes] = []
    for line in lines:
        data = line.encode()
        if not data:
            strings.append(b"")
        for start in range(0, len(data), MAX_STRING):
            strings.append(data[start:start + MAX_STRING])
    return strings


def explain_rrset(name: dns.name.Name, decision: Decision, scope: int,
                  correlation: str | None = None) -> dns.rrset.RRset:
    """The TXT RRset (TTL 0: never cached) answering ``_explain`` for this decision."""
    rdata = dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT,
                                    split_strings(explain_lines(decision, scope, correlation)))
    rrset = dns.rrset.RRset(name, dns.rdataclass.IN, dns.rdatatype.TXT)
    rrset.add(rdata, 0)
    return rrset
