"""Run the admin API with uvicorn on one address, loopback unless told otherwise."""

from __future__ import annotations

import asyncio
import socket
import sys

import uvicorn
from fastapi import FastAPI

from director.api.config import parse_listen
from state.ports import hostport, is_loopback


class RemoteListenRefused(ValueError):
    """A non-loopback address without ``allow_remote``."""


def bind(listen: str, *, allow_remote: bool = False) -> socket.socket:
    """A listening socket on ``listen`` (port 0: any free port)."""
    host, port = parse_listen(listen)
    if not allow_remote and not is_loopback(host):
        raise RemoteListenRefused(
            f"refusing to listen on {host}: not a loopback address (the admin API controls "
            "the deployment); pass --allow-remote to expose it, behind TLS")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{hostport((host, port))}"


def make_server(app: FastAPI, log_level: str = "info") -> uvicorn.Server:
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            server_header=False, timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def serve(app: FastAPI, sock: socket.socket, log_level: str = "info") -> None:
    """Serve ``app`` on ``sock`` until SIGINT/SIGTERM."""
    server = make_server(app, log_level)
    print(f"director api: listening on {url_of(sock)} (docs at {url_of(sock)}/docs)",
          file=sys.stderr, flush=True)
    asyncio.run(server.serve(sockets=[sock]))
