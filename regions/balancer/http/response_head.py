# SPDX-License-Identifier: Apache-2.0
"""An HTTP/1.x response head from a GPU server, parsed strictly: the status line, each
header line, one Content-Length at most, and whether the connection stays open."""

from __future__ import annotations

from multidict import CIMultiDict


class UpstreamProtocolError(ConnectionError):
    """The server's answer is not valid HTTP/1.1."""


def parse_head(raw: bytes) -> tuple[int, str, str, CIMultiDict[str]]:
    text = raw.decode("latin-1")
    status_line, _, rest = text.partition("\r\n")
    version, _, tail = status_line.partition(" ")
    code, _, reason = tail.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise UpstreamProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in rest.split("\r\n") if rest else ():
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise UpstreamProtocolError(f"bad header line {line[:80]!r}")
        headers.add(name, value.strip())
    if len(headers.getall("content-length", ())) > 1 and \
            len(set(headers.getall("content-length"))) > 1:
        raise UpstreamProtocolError("conflicting Content-Length headers")
    return int(code), reason, version, headers


def keeps_alive(version: str, headers: CIMultiDict[str]) -> bool:
    tokens = {t.strip().lower() for v in headers.getall("connection", ()) for t in v.split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens
