"""The authoritative DNS server of the global tier, layered like dnspython.

::

    transport   server.py (asyncio UDP/TCP), workers.py (SO_REUSEPORT processes)
        |
    app.py      DnsApp.respond(bytes) -> bytes: rate limit, fast path, full path, metrics
        |
    fastpath.py cached wire answers (no dnspython objects; service_answer.py writes a
        |       service's A/AAAA template by hand), falls back to
    responder.py the full path: bytes -> dnspython Message -> handler -> bytes
        |
    handler.py  pure Message -> Message (zone.py records, explain.py TXT)
        |
    decisions.py memoised engine decisions (locate.py: client and GeoIP per /24, /56)
        |
    director.engine (never imports dns.*)

Beside the layers, each worker's control plane (the state refresher, the stored-policy
follower) runs on a thread with its own event loop (control_thread.py, policy_thread.py),
off the loop that answers.

Exceptions: the server never raises on bad input; a query that cannot be parsed gets
FORMERR or is dropped, an internal error gets SERVFAIL (counted, logged).
"""

from director.dns.app import DnsApp, build_app
from director.dns.server import DnsServer, ServerConfig
from director.dns.snapshot_source import SnapshotSource, StaticSnapshotSource

__all__ = ["DnsApp", "DnsServer", "ServerConfig", "SnapshotSource", "StaticSnapshotSource",
           "build_app"]
