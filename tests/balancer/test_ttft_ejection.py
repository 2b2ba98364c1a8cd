# SPDX-License-Identifier: Apache-2.0
"""TTFT outlier ejection end to end: three real simulated GPU servers behind a real
balancer; one is switched to ``slow``, gets ejected while the others serve everything, and
comes back through slow start once the fault is cleared."""

from __future__ import annotations

from regions.balancer import BalancerConfig, OutlierConfig
from regions.simulator import Fault, FaultMode
from tests.balancer.helpers import admin_client, completion, stack, stream_completion
from tests.run_clock import RunClock, eventually

# 2,000 prompt tokens at time scale 5: about 30 ms to the first token, 0.3 s when 10x slower
BODY = completion(2, x_prompt_tokens=2000)
OUTLIERS = OutlierConfig(
    ttft_factor=3.0,
    ttft_min_samples=4,
    ttft_floor_s=0.05,
    base_ejection_s=3.0,  # longer than this machine stalls a process, so the checks made
    # while it lasts see it
    slow_start_s=0.5,
)


async def test_a_slowed_server_is_ejected_and_returns_after_the_fault_clears() -> None:
    config = BalancerConfig(outliers=OUTLIERS)
    # the engines and the balancer keep time on a RunClock: a stretch without a CPU must
    # not read as a slow first token (a second ejection after the fault cleared)
    async with RunClock() as clock, stack((1.0, 1.0, 1.0), time_scale=5.0, config=config,
                                          clock=clock) as (fleet, balancer, client):
        slow = balancer.pool["gpu0"]
        for _ in range(12):  # a healthy baseline: nobody is ejected
            assert (await stream_completion(client, BODY))[0] == 200
        assert all(b.ejections == 0 for b in balancer.pool)

        fleet["gpu0"].set_fault(Fault(FaultMode.SLOW, factor=10.0))
        for _ in range(80):
            status, _, _ = await stream_completion(client, BODY)
            assert status == 200  # nothing fails on the way
            if slow.ejected_for == "ttft":
                break
        assert slow.ejected_for == "ttft" and slow.ejections == 1
        assert balancer.pool.snapshot().backends[0].ejected
        served = []
        for _ in range(9):  # the ones sent while it is ejected avoid it
            if balancer.pool.snapshot().backends[0].ejected:
                served.append(await stream_completion(client, BODY))
        assert served
        assert {(status, backend != "gpu0") for status, backend, _ in served} == {(200, True)}
        async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
            assert 'director_balancer_ejections_total{backend="gpu0"} 1.0' in await resp.text()

        fleet["gpu0"].set_fault(Fault())
        await eventually(lambda: not balancer.pool.snapshot().backends[0].ejected, timeout=10.0)
        backends = set()
        for _ in range(30):
            status, backend, _ = await stream_completion(client, BODY)
            assert status == 200
            backends.add(backend)
        assert "gpu0" in backends  # back in rotation ...
        assert slow.ejections == 1  # ... and judged healthy on its fresh samples
        assert slow.ttft.samples >= 1
