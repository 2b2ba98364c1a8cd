"""``director lab up`` and ``director lab drill``: the HA lab on network namespaces
(:mod:`director.lab`), and drills against it. Both need root."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from director.console import plain_console

if TYPE_CHECKING:
    from director.lab.run import Lab

app = typer.Typer(help="The HA lab: the deployment over network namespaces, one per host.",
                  no_args_is_help=True)
out_console = plain_console(soft_wrap=False)
err = plain_console(stderr=True)

RegionsOption = Annotated[str, typer.Option("--regions", help="Regions, comma-separated "
                                            "(eu-west, us-east, eu-central, ap-south or any "
                                            "name).")]
HostsOption = Annotated[int, typer.Option("--hosts-per-region", min=1,
                                          help="Hosts per region: a balancer, a GPU server "
                                          "and a worker on each.")]
RunDirOption = Annotated[Path, typer.Option("--run-dir", help="Logs, configuration, "
                                            "credentials.")]
NumberOption = Annotated[int, typer.Option("--number", min=1, max=250,
                                           help="The lab's network: 10.231.N.0/24.")]


def _lab(regions: str, hosts: int, run_dir: Path, number: int) -> Lab:
    from director.lab.run import Lab
    from director.lab.shape import LabShape

    names = tuple(r.strip() for r in regions.split(",") if r.strip())
    return Lab(LabShape(regions=names, hosts_per_region=hosts), run_dir.resolve(), n=number,
               events=lambda line: out_console.print(line, markup=False, highlight=False))


@app.command()
def up(regions: RegionsOption = "eu-west", hosts_per_region: HostsOption = 2,
       run_dir: RunDirOption = Path("/tmp/director-lab"), number: NumberOption = 77) -> None:
    """Start the lab and keep it running until Ctrl-C: prints each host's address and where
    the state, the policy and the admin token are."""
    lab = _lab(regions, hosts_per_region, run_dir, number)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await lab.start()
        try:
            out_console.print(f"lab up in {lab.started_s:.1f} s; hosts:", markup=False)
            for name, host in lab.network.hosts.items():
                out_console.print(f"  {name:<14} {host.address:<15} ip netns exec {host.netns}",
                                  markup=False, highlight=False)
            out_console.print(f"state   {lab.redis.url}\npolicy  {lab.policy_path}\n"
                              f"token   {lab.run_dir / 'admin.token'}\n"
                              f"details {lab.run_dir / 'lab.json'}", markup=False,
                              highlight=False)
            await stop.wait()
        finally:
            await lab.stop()

    asyncio.run(run())


@app.command()
def drill(
    faults: Annotated[list[str], typer.Argument(help="master-kill, master-partition, "
                                                "sentinel-loss, dns-kill, balancer-kill, "
                                                "host-partition.")],
    repeat: Annotated[int, typer.Option(min=1, help="Runs of each fault.")] = 1,
    fault_s: Annotated[float, typer.Option(help="Seconds each fault lasts.")] = 15.0,
    settle_s: Annotated[float, typer.Option(help="Seconds watched after it is undone.")]
    = 15.0,
    out: Annotated[Path | None, typer.Option(help="Append each report (JSON) here.")] = None,
    regions: RegionsOption = "eu-west", hosts_per_region: HostsOption = 2,
    run_dir: RunDirOption = Path("/tmp/director-lab"), number: NumberOption = 77,
) -> None:
    """Start a lab, run each fault REPEAT times against it, print a line per run and the
    goals missed; exit 1 if any was."""
    from director.lab.drill import run_drill
    from director.lab.faults import FAULTS

    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        err.print(f"unknown fault(s) {', '.join(unknown)} (faults: {', '.join(FAULTS)})",
                  markup=False)
        raise typer.Exit(2)
    lab = _lab(regions, hosts_per_region, run_dir, number)
    lab.events = lambda line: None

    async def run() -> int:
        missed = 0
        await lab.start()
        try:
            out_console.print(f"lab up in {lab.started_s:.1f} s", markup=False)
            for fault in faults:
                for run_no in range(1, repeat + 1):
                    report = await run_drill(lab, fault, fault_s=fault_s, settle_s=settle_s)
                    report["run"] = run_no
                    if out is not None:
                        with out.open("a") as file:
                            file.write(json.dumps(report) + "\n")
                    failed = [goal for goal, met in report["goals"].items() if not met]
                    missed += bool(failed)
                    out_console.print(_line(report, failed), markup=False, highlight=False)
        finally:
            await lab.stop()
        return missed

    if asyncio.run(run()):
        raise typer.Exit(1)


def _line(report: dict[str, Any], failed: list[str]) -> str:
    follow = " ".join(f"{k}={v}s" for k, v in report["follow_s"].items())
    dns = " ".join(f"{d['server']}:{d['failed']}/{d['queries']} failed,{d['changed']} changed,"
                   f"p99 {d['p99_ms']}ms" for d in report["dns"])
    ledger, infer = report["ledger"], report["inference"]
    return (f"{report['fault']} #{report['run']}: follow {follow}; dns {dns}; writes "
            f"{ledger['durable']} durable {ledger['not_durable']} not durable "
            f"{ledger['failed']} failed, lost durable {len(ledger['lost_durable'])}; "
            f"inference {infer['failed']}/{infer['requests']} failed "
            f"({infer['failed_in_flight_on_killed']} in flight on the killed); "
            + ("all goals met" if not failed else f"MISSED {', '.join(failed)}"))
