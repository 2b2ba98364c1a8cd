"""How long the policy gate takes on large generated policies (``bench/policy_gen.py``).

Times each stage of ``director.policy_gate.accept`` (parse, compile, validate, static proof
and lint in ``check_policy``; the engine-run proof) and the whole
``director policy check`` command as a user runs it, over a few sizes. Medians of
``--repeats`` runs.

    python bench/policy_check.py                         # 10, 25, 50 regions
    python bench/policy_check.py --sizes 50x100x20 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.policy_gen import generate
from director.engine.engine_proof import run_engine_proof
from policies import check_policy


def measure(regions: int, gpus: int, services: int, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.dp"
        path.write_text(generate(regions, gpus, services), encoding="utf-8")
        checks, engines, commands = [], [], []
        proof = None
        for _ in range(repeats):
            start = time.perf_counter()
            result = check_policy(str(path))
            checks.append(time.perf_counter() - start)
            if result.policy is None:
                raise SystemExit(result.error().render())
            proof = run_engine_proof(result.policy)
            engines.append(proof.seconds)
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "director", "policy", "check",
                                   str(path)], capture_output=True, text=True)
            commands.append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
        assert proof is not None
        return {
            "size": f"{regions}x{gpus}x{services}", "lines": len(path.read_text().splitlines()),
            "check_s": statistics.median(checks), "engine_s": statistics.median(engines),
            "command_s": statistics.median(commands), "decisions": proof.decisions,
            "exhaustive": sum(s.exhaustive for s in proof.services),
            "missing": sum(len(s.missing) for s in proof.services), "ok": proof.ok,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10x100x20,25x100x20,50x100x20",
                        help="REGIONSxGPUSxSERVICES, comma separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| regions x GPUs x services | lines | check_policy s | engine proof s | decisions "
          "| `director policy check` s | regions left out |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        regions, gpus, services = (int(n) for n in size.split("x"))
        row = measure(regions, gpus, services, args.repeats)
        print(f"| {row['size']} | {row['lines']:,} | {row['check_s']:.2f} | "
              f"{row['engine_s']:.2f} | {row['decisions']:,} | {row['command_s']:.2f} | "
              f"{row['missing']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
