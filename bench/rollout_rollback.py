# SPDX-License-Identifier: Apache-2.0
"""Does a rollout roll a bad revision back, fast, and let a good one through?

One region in process: simulated GPU servers (half serving the baseline revision ``r1``,
half the candidate ``r2``), a balancer with a real embedded Valkey as the shared state,
and the rollout controller ticking every second, as the admin API does. Clients send
multi-turn sessions at ``--rps`` (Poisson arrivals, streamed completions). A rollout of
``r2`` starts at once with steps 5, 25, 50, 100 % and ``--interval`` seconds a step, the
default gates; the candidate's servers carry one fault for the whole run:

- ``slow``: every prefill and decode step ``--slow`` times longer;
- ``error5xx``: ``--errors`` of its answers are 500s;
- ``short``: answers cut to 30 % of their tokens, ending ``stop`` (output-length and
  finish-reason drift);
- ``none``: a good candidate, which must complete every step.

Per run: the verdict, the seconds until the rollback or the completion (and in
intervals), the share of the run's requests the candidate served (until the verdict, or
over ``--horizon`` intervals from the start, the load going on after a rollback; answers
the candidate still gave after the rollback are counted apart: in flight, or a balancer
not yet following), requests that failed at
the client, and sessions of a completed rollout that went back to the baseline after the
candidate served them (a rollout only grows the candidate's share: none should).
``--runs`` runs per fault; the summary gives the median and the range::

    .venv/bin/python bench/rollout_rollback.py [--runs 3] [--interval 30] [--rps 80]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from director.rollouts.controller import COMPLETED, ROLLED_BACK, RolloutController, RolloutSpec
from policies import load_policy_text
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.balancer.http.proxy import REVISION_HEADER
from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey

MODEL = "bench-model"
REGION = "eu"
SERVERS = 4  # half r1, half r2


def policy_text(urls: dict[str, str]) -> str:
    gpus = "\n".join(
        f"    gpu {name} {{ url {url}; models {MODEL}; revision {MODEL} "
        f"{'r1' if i % 2 == 0 else 'r2'} }}" for i, (name, url) in enumerate(urls.items()))
    return (f"zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}\n"
            f"region {REGION} {{ location 50 8; jurisdiction EU; endpoints 127.0.0.1; "
            f"capacity 100rps\n{gpus}\n}}\n"
            f"service chat.infer.example.com {{ all-down answer-nothing }}\n")


@dataclass
class Run:
    fault: str
    verdict: str
    seconds: float | None  # to the rollback (or the completion)
    requests: int
    served_by_candidate: int
    failed: int
    sessions: int
    moved_back: int  # sessions served by the candidate, then by the baseline again
    candidate_after_rollback: int  # answers by the candidate after the rollback

    def to_json(self) -> dict[str, object]:
        return dict(vars(self))


FAULTS = {
    "slow": lambda a: {"mode": "slow", "factor": a.slow},
    "error5xx": lambda a: {"mode": "error5xx", "rate": a.errors, "status": 500},
    "short": lambda a: {"mode": "short", "factor": 0.3},
    "none": lambda a: {"mode": "none"},
}


async def one_run(fault: str, args: argparse.Namespace, valkey: EmbeddedValkey,
                  seed: int) -> Run:
    prefix = f"bench-{seed}-{fault}"
    after_verdict, late = 0, 0
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), speed=1.0) for i in range(SERVERS)]
    rng = random.Random(seed)
    async with Fleet(specs, time_scale=args.time_scale) as fleet:
        urls = {s.spec.name: s.url for s in fleet}
        policy = load_policy_text(policy_text(urls))
        backends = [BackendSpec.coerce(g) for g in policy.regions[0].gpus]
        balancer = build_balancer(REGION, backends, BalancerConfig(
            shared_state=SharedStateConfig(valkey.url, prefix=prefix, publish_every_s=0.5)))
        store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
        controller = RolloutController(store, lambda *a: None)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            for i, server in enumerate(fleet):
                if i % 2 == 1:
                    async with client.post(server.url + "/_sim/fault",
                                           json=FAULTS[fault](args)) as resp:
                        assert resp.status == 200, await resp.text()
            started = time.monotonic()
            rollout = await controller.start(
                RolloutSpec(MODEL, "r1", "r2", steps=(5.0, 25.0, 50.0, 100.0),
                            interval_s=args.interval), policy, "bench")
            seen: dict[str, list[str]] = {}
            served: Counter[str] = Counter()
            failed = 0
            tasks: set[asyncio.Task[None]] = set()

            async def ask(session: str) -> None:
                nonlocal failed
                body = {"model": MODEL, "prompt": "hello", "max_tokens": args.tokens,
                        "x_prompt_tokens": 200, "stream": True}
                try:
                    async with client.post("/v1/completions", json=body,
                                           headers={"x-director-session": session}) as resp:
                        data = await resp.read()
                        revision = resp.headers.get(REVISION_HEADER, "?")
                        if resp.status != 200 or not data.endswith(b"data: [DONE]\n\n"):
                            failed += 1
                            return
                except aiohttp.ClientError:
                    failed += 1
                    return
                served[revision] += 1
                seen.setdefault(session, []).append(revision)

            verdict, ended = "timeout", None
            deadline = started + args.interval * 8
            horizon = started + args.interval * args.horizon
            next_tick = started
            while time.monotonic() < deadline:
                now = time.monotonic()
                if ended is None and now >= next_tick:
                    next_tick += 1.0
                    await controller.tick()
                    state = await controller.get(rollout.id)
                    if state.status in (ROLLED_BACK, COMPLETED):
                        verdict, ended = state.status, now - started
                        after_verdict = served["r2"]
                if ended is not None and (verdict == COMPLETED or now >= horizon):
                    break
                session = f"s{rng.randrange(args.sessions)}"
                task = asyncio.create_task(ask(session))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(rng.expovariate(args.rps))
            await asyncio.gather(*tasks, return_exceptions=True)
            if verdict == ROLLED_BACK:
                late = served["r2"] - after_verdict  # answered after the rollback
        await store.close()
    total = sum(served.values()) + failed
    # a rollout only grows the candidate's share, so a session moves onto it at most once;
    # after a rollback every session is back on the baseline, so only count until then
    moved_back = sum(1 for answers in seen.values()
                     if "r2" in answers and "r1" in answers[answers.index("r2"):])
    return Run(fault, verdict, ended, total, served["r2"], failed, len(seen),
               moved_back if verdict != ROLLED_BACK else 0, late)


def summary(runs: list[Run], interval: float) -> str:
    lines = ["| candidate | verdicts | seconds to verdict, median (range) | in intervals | "
             "served by the candidate | failed at the client | sessions moved back | "
             "candidate answers after the rollback |",
             "|---|---|---|---|---|---|---|---|"]
    for fault in FAULTS:
        mine = [r for r in runs if r.fault == fault]
        if not mine:
            continue
        verdicts = Counter(r.verdict for r in mine)
        secs = [r.seconds for r in mine if r.seconds is not None]
        spread = (f"{statistics.median(secs):.1f} ({min(secs):.1f}-{max(secs):.1f})"
                  if secs else "-")
        intervals = f"{statistics.median(secs) / interval:.2f}" if secs else "-"
        share = [r.served_by_candidate / r.requests for r in mine if r.requests]
        lines.append(
            f"| {fault} | {', '.join(f'{v} {n}' for v, n in verdicts.items())} | {spread} | "
            f"{intervals} | {statistics.median(share):.2%} ({min(share):.2%}-{max(share):.2%})"
            f" | {sum(r.failed for r in mine)} of {sum(r.requests for r in mine)} | "
            f"{sum(r.moved_back for r in mine)} of {sum(r.sessions for r in mine)} | "
            f"{sum(r.candidate_after_rollback for r in mine)} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--rps", type=float, default=80.0)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--slow", type=float, default=3.0)
    parser.add_argument("--errors", type=float, default=0.2)
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--horizon", type=float, default=0.0,
                        help="after a rollback, keep the load on until this many intervals "
                             "from the start: the candidate's share is over that horizon")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    args = parser.parse_args()
    runs = []
    with EmbeddedValkey() as valkey:
        for run in range(args.runs):
            for fault in args.faults.split(","):
                result = await one_run(fault, args, valkey, seed=run)
                print(json.dumps(result.to_json()), flush=True)
                runs.append(result)
    print(summary(runs, args.interval))
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in runs], indent=1))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
