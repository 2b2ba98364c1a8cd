"""Build the GeoIP network map (``director.geo_map``) in a forked child process.

Walking the whole database touches every page of it and allocates a few hundred thousand
temporary objects: done in the server process, that would hold the GIL against the answers
for ten seconds and leave its memory high afterwards. The child walks at the lowest
priority and sends back only the compact map (a few megabytes) through a pipe; the parent
waits on the pipe without holding the GIL.
"""

from __future__ import annotations

import os
import pickle

from director.geo_map import NetworkMap
from director.geo_merge import MergedNetworks


class MapBuildError(RuntimeError):
    """The child that builds the map failed or died."""


def compile_in_child(merged: MergedNetworks) -> NetworkMap:
    """``merged.compile_ipv4()``, computed in a forked child at nice 19."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, leave without running the parent's cleanup
        status = 1
        try:
            os.close(read_fd)
            os.setpriority(os.PRIO_PROCESS, 0, 19)
            data = pickle.dumps(merged.compile_ipv4(), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise MapBuildError(f"the map's builder exited with status {status}")
    network_map = pickle.loads(data)
    if not isinstance(network_map, NetworkMap):
        raise MapBuildError("the map's builder sent something else")
    return network_map
