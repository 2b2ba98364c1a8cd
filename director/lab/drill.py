"""One HA drill against a running lab: watch, inject a fault, undo it, judge.

While the fault is on, the drill keeps asking both DNS servers and a real resolver
(Unbound across the NS set) for the service, writes critical writes through the admin APIs
(a ledger of what each answer acknowledged), sends inference through the region's
balancers, and polls the master the Sentinels name for the tiers' writes. The report holds
the measurements and the verdict on each goal of the HA issue:

- every tier writes to the new master within Sentinel's down-after + 10 s;
- no DNS answer changes because of the fault (fail-static);
- probe results resume within 60 s;
- no acknowledged durable write is lost;
- no inference request fails unless it was in flight on a killed balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import httpx

from director.lab.faults import FAULTS, Injected
from director.lab.observers import DnsWatch, Follow, Inference, Ledger, post_key
from director.lab.resolver import Resolver
from director.lab.run import Lab
from director.lab.shape import API_PORT, BALANCER_PORT, MODEL, SERVICE, TENANT, ZONE
from state import AsyncStateStore

FOLLOW_SLACK_S = 10.0
PROBES_RESUME_S = 60.0


async def run_drill(lab: Lab, fault_name: str, *, fault_s: float = 15.0,
                    settle_s: float = 15.0, warmup_s: float = 3.0,
                    resolver: bool = True) -> dict[str, Any]:
    """Run one drill of ``fault_name`` (``director.lab.faults.FAULTS``); the report."""
    fault = FAULTS[fault_name]
    region = lab.shape.regions[0]
    hosts = [f"{region}-{i}" for i in range(1, lab.shape.hosts_per_region + 1)]
    apis = [f"http://{lab.address(f'api-{i}')}:{API_PORT}"
            for i in range(1, lab.shape.apis + 1)]
    key = await _make_key(apis, lab.admin_token())
    store = AsyncStateStore.from_url(lab.redis.url, credentials=lab.logins.provider("api"))
    dns_watches = [DnsWatch(SERVICE, lab.address(f"dns-{i}"))
                   for i in range(1, lab.shape.dns_servers + 1)]
    unbound = None
    if resolver:
        unbound = Resolver(ZONE, [lab.address(f"dns-{i}") for i in
                                  range(1, lab.shape.dns_servers + 1)],
                           lab.run_dir / "unbound").start(SERVICE)
        dns_watches.append(DnsWatch(SERVICE, "127.0.0.1", unbound.port, subnet=None))
    ledger = Ledger(apis, TENANT, lab.admin_token())
    inference = Inference([f"http://{lab.address(h)}:{BALANCER_PORT}" for h in hosts],
                          MODEL, key)
    await inference.key_known()
    master_before = lab.redis.master()
    follow = Follow(lab.redis.master, lab.logins.provider("api"), region, hosts,
                    old=master_before if fault.master_moves else None)
    stop = asyncio.Event()
    loops = [asyncio.create_task(watch.run(stop)) for watch in dns_watches]
    loops += [asyncio.create_task(ledger.run(stop)), asyncio.create_task(inference.run(stop)),
              asyncio.create_task(follow.run(stop))]
    injected: Injected | None = None
    try:
        await asyncio.sleep(warmup_s)
        baselines = [_baseline(w) for w in dns_watches]
        began = time.time()
        follow.since = began
        injected = await fault.inject(lab, fault_s)
        await asyncio.sleep(fault_s)
        await fault.undo(lab, injected)
        undone = time.time()
        await asyncio.sleep(settle_s)
        stop.set()
        await asyncio.gather(*loops)
        ledger_result = await ledger.verify(store)
    finally:
        stop.set()
        for loop in loops:
            loop.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*loops, return_exceptions=True)
        if injected is not None:
            with contextlib.suppress(Exception):
                await fault.undo(lab, injected)
        if unbound is not None:
            unbound.stop()
        await store.close()
    master_after = lab.redis.master()
    follows = {tier: round(at - began, 2) for tier, at in follow.seen.items()}
    first_durable = next((e.at for e in ledger.entries if e.at > began and e.durable), None)
    follows_s: dict[str, float | None] = {**follows}
    follows_s["api"] = round(first_durable - began, 2) if first_durable else None
    killed = injected.killed_endpoint if injected else None
    dead = urlsplit(killed).hostname if killed else None
    dns_reports = [w.summary(b, began, dead)
                   for w, b in zip(dns_watches, baselines, strict=True)]
    infer = inference.summary(began, killed, began if killed else None)
    report: dict[str, Any] = {
        "fault": fault.name, "summary": fault.summary,
        "injected": injected.what if injected else "", "fault_s": fault_s,
        "settle_s": settle_s, "undone_after_s": round(undone - began, 2),
        "master_before": master_before, "master_after": master_after,
        "down_after_s": lab.timings.down_after_ms / 1000,
        "follow_s": follows_s, "dns": dns_reports, "ledger": ledger_result,
        "inference": infer}
    report["goals"] = _goals(report, fault.master_moves)
    return report


def _baseline(watch: DnsWatch) -> frozenset[str]:
    answers = Counter(s.answer for s in watch.samples if s.ok)
    if not answers:
        raise RuntimeError(f"no answer from {watch.server}:{watch.port} before the fault")
    return answers.most_common(1)[0][0]


def _goals(report: dict[str, Any], master_moves: bool) -> dict[str, bool]:
    bound = report["down_after_s"] + FOLLOW_SLACK_S
    follows = report["follow_s"]
    goals = {
        # no answer changed but by leaving out a balancer the fault took down
        "dns_answers_unchanged": all(d["changed"] == 0 for d in report["dns"]),
        "no_durable_write_lost": not report["ledger"]["lost_durable"],
        "no_inference_failed_but_in_flight": report["inference"]["failed_otherwise"] == 0,
        "probe_results_resume_within_60s": (follows.get("workers") or 1e9) <= PROBES_RESUME_S,
    }
    if master_moves:
        goals["master_moved"] = report["master_before"] != report["master_after"]
        goals["every_tier_follows_within_down_after_plus_10s"] = all(
            (follows.get(tier) or 1e9) <= bound for tier in ("api", "balancers", "workers"))
    return goals


async def _make_key(apis: list[str], token: str) -> str:
    """A tenant API key for the drill's inference, from the first API that answers."""
    async with httpx.AsyncClient(timeout=10.0,
                                 headers={"authorization": f"Bearer {token}"}) as client:
        reply, _ = await post_key(client, apis, TENANT, "drill-inference")
    if reply is None or reply.status_code != 201:
        raise RuntimeError("no admin API made a tenant key")
    return str(reply.json()["key"])
