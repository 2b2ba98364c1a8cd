"""How queries reach the ``DnsApp`` and answers leave it: one module per transport.

- ``mmsg``: UDP in batches of ``recvmmsg``/``sendmmsg`` (Linux), driven by the event loop;
- ``udp_reader``: the same batches on a thread per socket (opt-in, RRL off);
- ``udp`` and ``udp_answer``: UDP with ``recvfrom``/``sendto`` where ``mmsg`` is missing;
- ``tcp``: length-framed TCP connections;
- ``sockets``: binding a UDP and a TCP socket to one listen address;
- ``reuseport`` and ``workers``: several processes on one port (``--workers N``).

Every transport answers through the app: ``DnsApp.respond(data, host, tcp)`` for one
query; the batched UDP transports, per batch, ``DnsApp.udp_memo()`` (the answer cache's
UDP table, its metric counters and the lane lookup, for the hits they answer themselves),
``DnsApp.rate_limit()`` and ``DnsApp.udp_responder(limited=False)`` for the rest.
"""
