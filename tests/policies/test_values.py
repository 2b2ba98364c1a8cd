"""Value converters: what each accepts and what it says about what it rejects."""

from __future__ import annotations

import pytest

from policies import values
from policies.values import ValueProblem

DURATIONS = {
    "milliseconds": ("500ms", 0.5),
    "seconds": ("30s", 30.0),
    "minutes": ("5m", 300.0),
    "hours": ("1h", 3600.0),
    "days": ("14d", 14 * 86400.0),
    "fraction": ("1.5s", 1.5),
    "zero": ("0s", 0.0),
    "compound": ("1m30s", 90.0),
    "compound-days": ("1d12h", 129600.0),
    "every-unit": ("1d1h1m1s500ms", 86400 + 3600 + 60 + 1.5),
}


@pytest.mark.parametrize(("text", "seconds"), DURATIONS.values(), ids=DURATIONS.keys())
def test_duration(text: str, seconds: float) -> None:
    assert values.duration(text) == seconds


BAD_DURATIONS = {
    "no-unit": ("30", "'30' has no unit", "write 30s for seconds"),
    "unknown-unit": ("2sec", "'2sec' is not a duration", "known units: ms s m h d"),
    "word": ("soon", "'soon' is not a duration", None),
    "negative": ("-1s", "'-1s' is not a duration", None),
    "units-growing": ("30s1m", "'30s1m' is not a duration", None),
    "unit-twice": ("1s1s", "'1s1s' is not a duration", None),
    "trailing-number": ("1m30", "'1m30' is not a duration", None),
}


@pytest.mark.parametrize(("text", "message", "hint"), BAD_DURATIONS.values(),
                         ids=BAD_DURATIONS.keys())
def test_bad_duration(text: str, message: str, hint: str | None) -> None:
    with pytest.raises(ValueProblem) as caught:
        values.duration(text)
    assert (caught.value.message, caught.value.hint) == (message, hint)
    assert caught.value.expected == values.DURATION_EXPECTED


CONVERSIONS = {
    "percent": (values.percent, "85%", 0.85),
    "percent-fraction": (values.percent, "12.5%", 0.125),
    "rate-rps": (values.rate, "300rps", 300.0),
    "rate-rpm": (values.rate, "1200rpm", 20.0),
    "integer": (values.integer, "42", 42),
    "number-negative": (values.number, "-77.04", -77.04),
    "number-plus": (values.number, "+5", 5.0),
    "hostname-lowered": (values.hostname, "Chat.Infer.Example.COM.", "chat.infer.example.com"),
    "ipv4": (lambda t: str(values.ip_address(t)), "192.0.2.1", "192.0.2.1"),
    "ipv6-normalised": (lambda t: str(values.ip_address(t)), "2001:DB8:0::1", "2001:db8::1"),
    "network": (values.network, "10.0.0.0/8", "10.0.0.0/8"),
    "network-v6": (values.network, "::1/128", "::1/128"),
    "country": (values.country, "DE", "DE"),
    "continent": (values.continent, "EU", "EU"),
    "url-trailing-slash": (values.url, "http://10.0.0.5:8000/", "http://10.0.0.5:8000"),
    "url-https": (values.url, "https://gpu.example.com", "https://gpu.example.com"),
    "path": (values.path, "/health", "/health"),
    "name": (values.name, "eu-west_2.b", "eu-west_2.b"),
}


@pytest.mark.parametrize(("convert", "text", "value"), CONVERSIONS.values(),
                         ids=CONVERSIONS.keys())
def test_conversion(convert, text: str, value) -> None:
    assert convert(text) == value


REJECTIONS = {
    "percent-without-sign": (values.percent, "85", "'85' is not a percentage", "write 85%"),
    "percent-word": (values.percent, "most", "'most' is not a percentage", None),
    "rate-unit": (values.rate, "100qps", "'100qps' is not a request rate",
                  "known units: rps rpm"),
    "rate-bare": (values.rate, "6", "'6' is not a request rate", "write 6rps"),
    "continent-lower": (values.continent, "eu", "'eu' is not a continent code", "write EU"),
    "integer-fraction": (values.integer, "2.5", "'2.5' is not a whole number", None),
    "number-word": (values.number, "heavy", "'heavy' is not a number", None),
    "number-exponent": (values.number, "1e3", "'1e3' is not a number", None),
    "number-nan": (values.number, "nan", "'nan' is not a number", None),
    "number-infinite": (values.number, "9" * 400, f"'{'9' * 400}' is not a finite number",
                        None),
    "hostname-one-label": (values.hostname, "localhost", "'localhost' is not a valid host name",
                           None),
    "hostname-underscore": (values.hostname, "a_b.example", "'a_b.example' is not a valid host "
                            "name", None),
    "ip": (values.ip_address, "127.0.0.256", "'127.0.0.256' is not an IP address", None),
    "network-host-bits": (values.network, "10.0.0.1/8", "'10.0.0.1/8' is not a network",
                          "10.0.0.1/8 has host bits set"),
    "network-word": (values.network, "localhost", "'localhost' is not a network", None),
    "country-lower": (values.country, "de", "'de' is not a country code", "write DE"),
    "country-long": (values.country, "DEU", "'DEU' is not a country code", None),
    "continent": (values.continent, "EUR", "'EUR' is not a continent code", None),
    "url-scheme": (values.url, "ftp://x", "'ftp://x' is not an HTTP URL",
                   "only http and https are probed"),
    "url-bad-ipv6": (values.url, "http://[::1", "'http://[::1' is not an HTTP URL", None),
    "url-port": (values.url, "http://x:99999", "'http://x:99999' has an invalid port", None),
    "url-port-zero": (values.url, "http://x:0", "'http://x:0' has an invalid port", None),
    "url-no-host": (values.url, "http://:80", "'http://:80' is not an HTTP URL", None),
    "path-relative": (values.path, "health", "'health' is not an HTTP path", None),
    "name-slash": (values.name, "us/east", "'us/east' is not a valid name", None),
    "name-trailing-dash": (values.name, "us-", "'us-' is not a valid name", None),
}


@pytest.mark.parametrize(("convert", "text", "message", "hint"), REJECTIONS.values(),
                         ids=REJECTIONS.keys())
def test_rejection(convert, text: str, message: str, hint: str | None) -> None:
    with pytest.raises(ValueProblem) as caught:
        convert(text)
    assert caught.value.message == message
    assert caught.value.hint == hint
    assert caught.value.expected


RANGES = {
    "latitude-high": (lambda t: values.number(t, -90, 90, "latitude"), "98.9",
                      "latitude 98.9 is too large", "from -90 to 90"),
    "longitude-low": (lambda t: values.number(t, -180, 180, "longitude"), "-181",
                      "longitude -181 is too small", "from -180 to 180"),
    "at-least": (lambda t: values.integer(t, 1), "0", "0 is too small", "at least 1"),
    "at-most": (lambda t: values.integer(t, None, 8, "answer count"), "9",
                "answer count 9 is too large", "at most 8"),
}


@pytest.mark.parametrize(("convert", "text", "message", "expected"), RANGES.values(),
                         ids=RANGES.keys())
def test_range(convert, text: str, message: str, expected: str) -> None:
    with pytest.raises(ValueProblem) as caught:
        convert(text)
    assert (caught.value.message, caught.value.expected) == (message, expected)


def test_range_bounds_are_inclusive() -> None:
    assert values.number("90", -90, 90) == 90.0
    assert values.integer("1", 1, 8) == 1
