"""Request body limit: 413 whether the length is declared, missing (chunked) or a lie."""

from __future__ import annotations

import asyncio
import contextlib
import json
from urllib.parse import urlsplit

from api_helpers import running_api


async def raw_request(url: str, head: str, body: bytes = b"", *, chunks: list[bytes] = ()
                      ) -> tuple[int, bytes]:
    """Send ``head`` (request line and headers, no blank line) and a body as given, then
    read the first response: its status and the bytes after its head."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head.encode() + b"\r\n\r\n" + body)
        for chunk in chunks:
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        if chunks:
            writer.write(b"0\r\n\r\n")
        with contextlib.suppress(ConnectionError):  # the server may stop reading once it
            await writer.drain()                    # has answered
        response = await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()
    status = int(response.split(b" ", 2)[1])
    return status, response.split(b"\r\n\r\n", 1)[1]


def head(api, method: str, path: str, *headers: str) -> str:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {urlsplit(api.url).netloc}",
             f"Authorization: Bearer {api.admin}", *headers]
    return "\r\n".join(lines)


async def test_declared_length_over_the_limit_is_refused_before_the_body(
        tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await raw_request(
            api.url, head(api, "PUT", "/api/v1/policy", "Content-Length: 2000000",
                          "Content-Type: text/plain"))
        assert status == 413
        assert json.loads(body)["error"] == ("request body of 2000000 bytes is over the limit "
                                             "of 1048576 bytes")


async def test_chunked_body_over_the_limit_is_refused(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix, max_body=1024) as api:
        _, before = await api.get("/api/v1/policy")
        status, body = await raw_request(
            api.url, head(api, "PUT", "/api/v1/policy", "Transfer-Encoding: chunked",
                          "Content-Type: text/plain"), chunks=[b"#" * 1000] * 4)
        assert status == 413
        assert "over the limit of 1024 bytes" in json.loads(body)["error"]

        # The same through aiohttp's streaming upload (no Content-Length at all).
        async def stream():
            for _ in range(8):
                yield b"x" * 512

        status, answer = await api.post("/api/v1/regions/eu-west/drain", data=stream())
        assert status == 413, answer
        _, now = await api.get("/api/v1/status")
        assert not next(r for r in now["regions"] if r["name"] == "eu-west")["draining"]
        assert (await api.get("/api/v1/policy"))[1] == before


async def test_a_lying_content_length_never_lets_more_than_it_through(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix, max_body=1024) as api:
        _, before = await api.get("/api/v1/policy")
        # Declares 100 bytes and sends 4000: the server reads 100 as the body (a bad policy,
        # 422) and the rest as garbage, never as a body over the limit.
        status, _ = await raw_request(
            api.url, head(api, "PUT", "/api/v1/policy", "Content-Length: 100",
                          "Content-Type: text/plain"), b"zone {" + b"#" * 3994)
        assert status == 422
        # Declares more than it sends and more than the limit: refused at once.
        status, _ = await raw_request(
            api.url, head(api, "PUT", "/api/v1/policy", "Content-Length: 5000",
                          "Content-Type: text/plain"), b"#" * 10)
        assert status == 413
        assert (await api.get("/api/v1/policy"))[1] == before
        status, _ = await api.put("/api/v1/policy", data=b"x" * 1025)
        assert status == 413
