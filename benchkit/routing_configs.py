# SPDX-License-Identifier: Apache-2.0
"""nginx and HAProxy configurations for the routing benchmark, set up fairly for streaming.

- nginx ``least_conn``: ``proxy_buffering off`` (each SSE chunk is passed on as it comes),
  HTTP/1.1 keep-alive to the upstreams, one worker, no access log.
- HAProxy ``leastconn``: ``option http-no-delay`` (stock HAProxy holds small streamed
  chunks and adds about 200 ms to TTFT), connection reuse, one thread, no log.

Both bind to loopback only, with no per-server connection cap (what their ``leastconn``
does out of the box), and write every file (pid, temp paths, logs) to the given directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

Upstream = tuple[str, str, int]  # name, host, port


def render_nginx(workdir: Path, listen: tuple[str, int], upstreams: Sequence[Upstream]) -> str:
    servers = "\n".join(f"        server {host}:{port};" for _, host, port in upstreams)
    w = workdir
    return f"""\
worker_processes 1;
daemon off;
master_process on;
pid {w}/nginx.pid;
error_log {w}/nginx-error.log warn;
user root;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {w}/client_body;
    proxy_temp_path {w}/proxy;
    fastcgi_temp_path {w}/fastcgi;
    uwsgi_temp_path {w}/uwsgi;
    scgi_temp_path {w}/scgi;
    upstream gpus {{
        least_conn;
{servers}
        keepalive 512;
    }}
    server {{
        listen {listen[0]}:{listen[1]};
        location / {{
            proxy_pass http://gpus;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
        }}
    }}
}}
"""


def render_haproxy(workdir: Path, listen: tuple[str, int], upstreams: Sequence[Upstream]) -> str:
    servers = "\n".join(f"    server {name} {host}:{port}" for name, host, port in upstreams)
    return f"""\
global
    maxconn 4000
    nbthread 1
    pidfile {workdir}/haproxy.pid

defaults
    mode http
    timeout connect 5s
    timeout client 600s
    timeout server 600s
    option http-no-delay
    option http-keep-alive

frontend fe
    bind {listen[0]}:{listen[1]}
    default_backend gpus

backend gpus
    balance leastconn
    http-reuse always
{servers}
"""
