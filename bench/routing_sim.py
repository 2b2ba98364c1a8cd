# SPDX-License-Identifier: Apache-2.0
"""One simulated GPU server for the routing benchmark: ``python -m regions.simulator`` on
uvloop, so that six of them and the proxies fit the machine's cores with time to spare
(``lost_model_seconds`` in ``/_sim/state`` says when they do not). Same arguments."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from regions.simulator.__main__ import main

if __name__ == "__main__":
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    sys.exit(main())
