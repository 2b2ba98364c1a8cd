"""Typed values of directive arguments: durations, percentages, rates, addresses, names.

Each converter takes the argument text and returns the value or raises ``ValueProblem`` with
what was expected, so the compiler can point at the exact argument.
"""

from __future__ import annotations

import ipaddress
import math
import re
from urllib.parse import urlsplit

from policies.continents import CONTINENT_OF


class ValueProblem(ValueError):
    def __init__(self, message: str, expected: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.hint = hint


_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?)"
_DURATION_TERM = re.compile(_NUMBER + r"(?P<unit>ms|s|m|h|d)")
_DURATION_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}  # largest first
_UNIT_RANK = {unit: rank for rank, unit in enumerate(_DURATION_UNITS)}
_PERCENT = re.compile(_NUMBER + r"%$")
_RATE = re.compile(_NUMBER + r"(?P<unit>rps|rpm)$")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)$")
CONTINENTS = {
    "AF": "Africa", "AN": "Antarctica", "AS": "Asia", "EU": "Europe",
    "NA": "North America", "OC": "Oceania", "SA": "South America",
}

DURATION_EXPECTED = "a duration such as 500ms, 30s, 5m, 1h or 14d"


def duration(text: str) -> float:
    """Seconds in ``text``: one or more number-unit terms, largest unit first (``30s``,
    ``1m30s``, ``1d12h``, ``500ms``). The one duration grammar of the policy language and
    the drill files."""
    seconds = compound_seconds(text)
    if seconds is not None:
        return seconds
    if re.fullmatch(_NUMBER, text):
        raise ValueProblem(f"'{text}' has no unit", expected=DURATION_EXPECTED,
                           hint=f"write {text}s for seconds")
    raise ValueProblem(f"'{text}' is not a duration", expected=DURATION_EXPECTED,
                       hint=_unit_hint(text, "ms s m h d"))


def compound_seconds(text: str) -> float | None:
    """Seconds in ``text`` if it is a duration (see ``duration``), else None."""
    total, at, last_rank = 0.0, 0, -1
    while at < len(text):
        term = _DURATION_TERM.match(text, at)
        if term is None:
            return None
        rank = _UNIT_RANK[term["unit"]]
        if rank <= last_rank:  # units must get smaller: "1m30s", never "30s1m" or "1s1s"
            return None
        total += float(term["num"]) * _DURATION_UNITS[term["unit"]]
        at, last_rank = term.end(), rank
    return total if at else None


def percent(text: str) -> float:
    """A share written with '%', returned as a fraction (85% -> 0.85)."""
    match = _PERCENT.match(text)
    if not match:
        hint = f"write {text}%" if re.fullmatch(_NUMBER, text) else None
        raise ValueProblem(f"'{text}' is not a percentage", expected="a percentage such as 85%",
                           hint=hint)
    return float(match["num"]) / 100.0


def rate(text: str) -> float:
    """Requests per second, written 300rps (or 600rpm)."""
    match = _RATE.match(text)
    if not match:
        bare = re.fullmatch(_NUMBER, text)
        raise ValueProblem(f"'{text}' is not a request rate",
                           expected="a rate such as 300rps or 1200rpm",
                           hint=f"write {text}rps" if bare else _unit_hint(text, "rps rpm"))
    value = float(match["num"])
    return value / 60.0 if match["unit"] == "rpm" else value


def integer(text: str, minimum: int | None = None, maximum: int | None = None,
            what: str = "", *, signed: bool = False) -> int:
    """A whole number, optionally within [minimum, maximum]; ``what`` names it in messages.
    With ``signed``, a leading ``-`` or ``+`` is allowed (a tenant's ``priority -5``)."""
    if not re.fullmatch(r"[-+]?[0-9]+" if signed else r"[0-9]+", text):
        raise ValueProblem(f"'{text}' is not a whole number",
                           expected=_range_expected("a whole number", minimum, maximum))
    value = int(text)
    _check_range(text, value, minimum, maximum, what)
    return value


_DECIMAL = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$")


def number(text: str, minimum: float | None = None, maximum: float | None = None,
           what: str = "") -> float:
    """A decimal number (no exponent, no '_'), optionally within [minimum, maximum]."""
    if not _DECIMAL.match(text):
        raise ValueProblem(f"'{text}' is not a number",
                           expected=_range_expected("a number", minimum, maximum))
    value = float(text)
    if not math.isfinite(value):
        raise ValueProblem(f"'{text}' is not a finite number", expected="a number")
    _check_range(text, value, minimum, maximum, what)
    return value


_SIZE = re.compile(_NUMBER + r"(?P<unit>B|KB|MB|GB)$")
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def size(text: str) -> int:
    """A size in bytes: ``512KB``, ``64MB``, ``1GB`` (binary units)."""
    m = _SIZE.match(text)
    if not m:
        hint = f"write {text}MB" if re.fullmatch(_NUMBER, text) else None
        raise ValueProblem(f"'{text}' is not a size",
                           expected="a size such as 512KB, 64MB or 1GB", hint=hint)
    return int(float(m["num"]) * _SIZE_UNITS[m["unit"]])


def _check_range(text: str, value: float, minimum: float | None, maximum: float | None,
                 what: str = "") -> None:
    subject = f"{what} {text}" if what else text
    if minimum is not None and value < minimum:
        raise ValueProblem(f"{subject} is too small",
                           expected=_range_expected("", minimum, maximum))
    if maximum is not None and value > maximum:
        raise ValueProblem(f"{subject} is too large",
                           expected=_range_expected("", minimum, maximum))


def _range_expected(kind: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        bounds = f"from {_fmt(minimum)} to {_fmt(maximum)}"
    elif minimum is not None:
        bounds = f"at least {_fmt(minimum)}"
    elif maximum is not None:
        bounds = f"at most {_fmt(maximum)}"
    else:
        return kind
    return f"{kind} {bounds}".strip()


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def name(text: str, what: str = "name") -> str:
    if not _NAME.match(text):
        raise ValueProblem(f"'{text}' is not a valid {what}",
                           expected="letters, digits, '-', '_' or '.', starting and ending "
                                    "with a letter or digit")
    return text


def hostname(text: str) -> str:
    """A DNS name, lower-cased, without the trailing dot."""
    value = text.lower().rstrip(".")
    labels = value.split(".")
    if len(value) > 253 or len(labels) < 2 or not all(_LABEL.match(lbl) for lbl in labels):
        raise ValueProblem(f"'{text}' is not a valid host name",
                           expected="a fully qualified DNS name such as chat.infer.example.com")
    return value


def ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValueProblem(f"'{text}' is not an IP address",
                           expected="an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1"
                           ) from None


def network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=True))
    except ValueError as exc:
        raise ValueProblem(f"'{text}' is not a network", expected="a CIDR such as 127.0.0.0/8",
                           hint=str(exc) if "host bits" in str(exc) else None) from None


# Codes people write for a country that ISO 3166-1 spells otherwise.
_COUNTRY_ALIASES = {"UK": "GB", "EL": "GR"}


def country(text: str) -> str:
    """An ISO 3166-1 alpha-2 code (or XK): a code no GeoIP record can carry would match
    no client, silently."""
    if not re.fullmatch(r"[A-Z]{2}", text):
        hint = f"write {text.upper()}" if re.fullmatch(r"[A-Za-z]{2}", text) else None
        raise ValueProblem(f"'{text}' is not a country code",
                           expected="an ISO 3166-1 alpha-2 code such as DE or FR", hint=hint)
    if text not in CONTINENT_OF:
        alias = _COUNTRY_ALIASES.get(text)
        raise ValueProblem(f"'{text}' is not an ISO 3166-1 country code",
                           expected="an ISO 3166-1 alpha-2 code such as DE or FR",
                           hint=f"write {alias}" if alias else None)
    return text


def continent(text: str) -> str:
    if text not in CONTINENTS:
        hint = f"write {text.upper()}" if text.upper() in CONTINENTS else None
        raise ValueProblem(f"'{text}' is not a continent code",
                           expected="one of " + ", ".join(sorted(CONTINENTS)), hint=hint)
    return text


def zmq_endpoint(text: str) -> str:
    """A ZeroMQ address to connect to: ``tcp://HOST:PORT`` or ``ipc://PATH``."""
    expected = "a ZeroMQ address such as tcp://10.0.0.5:5557"
    if text.startswith("ipc://") and len(text) > len("ipc://"):
        return text
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueProblem(f"'{text}' is not a ZeroMQ address", expected=expected) from None
    if parts.scheme != "tcp" or not host or not port or host == "*":
        raise ValueProblem(f"'{text}' is not a ZeroMQ address to connect to",
                           expected=expected)
    return text


def url(text: str) -> str:
    expected = "a URL such as http://10.0.0.5:8000"
    try:
        parts = urlsplit(text)
        host = parts.hostname  # raises on a malformed IPv6 literal
    except ValueError:
        raise ValueProblem(f"'{text}' is not an HTTP URL", expected=expected) from None
    if parts.scheme not in ("http", "https") or not host:
        hint = "only http and https are probed" if parts.scheme and host else None
        raise ValueProblem(f"'{text}' is not an HTTP URL", expected=expected, hint=hint)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueProblem(f"'{text}' has an invalid port", expected="a port 1-65535") from None
    return text.rstrip("/")


def path(text: str) -> str:
    if not text.startswith("/") or any(ch.isspace() for ch in text):
        raise ValueProblem(f"'{text}' is not an HTTP path", expected="a path such as /health")
    return text


_QUOTA_RATE = re.compile(_NUMBER + r"(?P<scale>[kM]?)/(?P<unit>s|min|h)$")
_PER_MINUTE = {"s": 60.0, "min": 1.0, "h": 1.0 / 60.0}
_SCALE = {"": 1.0, "k": 1_000.0, "M": 1_000_000.0}
QUOTA_RATE_EXPECTED = "a count per unit of time such as 600/min, 10/s, 36000/h or 200k/min"


def per_minute(text: str) -> float:
    """A quota rate, returned per minute: a count, optionally with ``k`` (thousand) or ``M``
    (million), then ``/s``, ``/min`` or ``/h`` (``10/s`` -> 600.0, ``200k/min`` ->
    200000.0, ``36000/h`` -> 600.0)."""
    return quota_rate(text)[0]


def quota_rate(text: str) -> tuple[float, float]:
    """A quota rate as ``per_minute`` reads it, and the count as written (``10/s`` ->
    (600.0, 10.0)): the size of its bucket unless a burst is declared."""
    match = _QUOTA_RATE.match(text)
    if match:
        count = float(match["num"]) * _SCALE[match["scale"]]
        return count * _PER_MINUTE[match["unit"]], count
    if re.fullmatch(_NUMBER + r"[kM]?", text):
        raise ValueProblem(f"'{text}' has no unit", expected=QUOTA_RATE_EXPECTED,
                           hint=f"write {text}/min for a count per minute")
    rps = re.fullmatch(_NUMBER + r"(?P<unit>rps|rpm)", text)
    if rps:
        unit = "s" if rps["unit"] == "rps" else "min"
        hint: str | None = f"quotas are written per unit of time: {rps['num']}/{unit}"
    elif re.fullmatch(_NUMBER + r"[kKmM]?/.*", text):
        hint = "known units: /s /min /h; counts may end in k (thousand) or M (million)"
    else:
        hint = None
    raise ValueProblem(f"'{text}' is not a quota rate", expected=QUOTA_RATE_EXPECTED, hint=hint)


_COUNT = re.compile(_NUMBER + r"(?P<scale>[kM]?)$")
QUOTA_BURST_EXPECTED = "a count of at least 1 such as 40, 500k or 2M"


def burst(text: str) -> float:
    """A quota's burst: a count of units, at least 1, optionally with ``k`` or ``M``."""
    match = _COUNT.match(text)
    if not match:
        hint = "a burst is a count, without a unit" if "/" in text else None
        raise ValueProblem(f"'{text}' is not a burst", expected=QUOTA_BURST_EXPECTED,
                           hint=hint)
    count = float(match["num"]) * _SCALE[match["scale"]]
    if count < 1:
        raise ValueProblem(f"a burst of {text} admits less than one unit at once",
                           expected=QUOTA_BURST_EXPECTED)
    return count


def on_off(text: str) -> bool:
    """``on`` or ``off``, as True or False."""
    if text not in ("on", "off"):
        raise ValueProblem(f"'{text}' is neither on nor off", expected="'on' or 'off'")
    return text == "on"


_TENANT = re.compile(r"[a-z0-9][a-z0-9_-]*$")
TENANT_NAME_MAX = 64


def tenant_name(text: str) -> str:
    """A tenant's name: lower-case letters, digits, '-' and '_', at most 64 characters (it
    becomes part of state-store keys and a metric label value)."""
    expected = (f"lower-case letters, digits, '-' and '_', starting with a letter or digit, "
                f"at most {TENANT_NAME_MAX} characters")
    if len(text) > TENANT_NAME_MAX:
        raise ValueProblem(f"tenant name '{text[:20]}...' is {len(text)} characters long",
                           expected=expected)
    if not _TENANT.match(text):
        fixed = text.lower()
        hint = f"write {fixed}" if _TENANT.match(fixed) else None
        raise ValueProblem(f"'{text}' is not a valid tenant name", expected=expected,
                           hint=hint)
    return text


JWKS_EXPECTED = "a file path (relative to this policy file) or an https:// URL"


def jwks_source(text: str) -> str:
    """Where a JWKS is read: an ``https://`` URL with a host, or a file path (any text
    without a scheme). Whether the file exists is checked by the loader, not here."""
    if not text.strip():
        raise ValueProblem("the JWKS location is empty", expected=JWKS_EXPECTED)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        raise ValueProblem(f"'{text}' is not an https URL", expected=JWKS_EXPECTED) from None
    if parts.scheme == "https" and host:
        return text
    hint = ("keys are only fetched over https, so that nobody on the path can replace them"
            if parts.scheme == "http" else None)
    raise ValueProblem(f"'{text}' is neither a file path nor an https URL",
                       expected=JWKS_EXPECTED, hint=hint)


def word(text: str, what: str) -> str:
    """Any non-empty text (an issuer, an audience, a claim name); ``what`` names it."""
    if not text.strip():
        raise ValueProblem(f"the {what} is empty", expected=f"a non-empty {what}")
    return text


def _unit_hint(text: str, units: str) -> str | None:
    if re.fullmatch(_NUMBER + r"[A-Za-z%]*", text):
        return f"known units: {units}"
    return None
