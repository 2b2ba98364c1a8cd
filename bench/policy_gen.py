# SPDX-License-Identifier: Apache-2.0
"""Write a large, valid generated policy (``benchkit.policy_gen``) to stdout.

    python bench/policy_gen.py --regions 50 --gpus 100 --services 20 > big.dp
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.policy_gen import generate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--regions", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--services", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.stdout.write(generate(args.regions, args.gpus, args.services, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
