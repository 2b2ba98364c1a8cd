"""A fake GPU inference server on loopback: settable /health status and /metrics text.

It stands in for what we do not own (vLLM, SGLang, ...): ``/health`` answers ``status``
after ``delay`` seconds, ``/healthz`` likewise (a balancer), ``/metrics`` answers ``metrics``.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


class FakeGpu:
    def __init__(self, metrics: str = "", health_body: bytes = b"ok") -> None:
        self.status = 200
        self.delay = 0.0
        self.metrics = metrics
        self.health_body = health_body
        self.hits = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.hits += 1
                if fake.delay:
                    time.sleep(fake.delay)
                if self.path in ("/health", "/healthz"):
                    self._answer(fake.status, fake.health_body, "text/plain")
                elif self.path == "/metrics":
                    self._answer(200, fake.metrics.encode(), "text/plain; version=0.0.4")
                else:
                    self._answer(404, b"not found", "text/plain")

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the prober gave up (timeout): nothing to answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeGpu:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
