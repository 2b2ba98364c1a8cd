"""``python -m workers POLICY [--redis URL] [--queues q1,q2] [--concurrency N]``: beat follows
the policy stored in Redis once there is one (``--no-follow-policy``: the file only)."""

from __future__ import annotations

import argparse
import os
import sys

from workers.config import DEFAULT_REDIS_URL
from workers.runner import DEFAULT_CONCURRENCY, DEFAULT_POOL, run_worker


def main(argv: list[str] | None = None) -> None:
    """Start a probe worker with beat for a policy file."""
    parser = argparse.ArgumentParser(prog="python -m workers", description=main.__doc__)
    parser.add_argument("policy", help="policy file the probe schedule follows")
    parser.add_argument("--redis", default=os.environ.get("DIRECTOR_REDIS_URL", DEFAULT_REDIS_URL))
    parser.add_argument("--queues", help="comma-separated queues (default: every region's)")
    parser.add_argument("--pool", default=DEFAULT_POOL)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--no-beat", action="store_true", help="probe only; beat runs elsewhere")
    parser.add_argument("--no-follow-policy", action="store_true",
                        help="beat follows the policy file only, not the one stored in Redis")
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    from policies import PolicyError

    try:
        run_worker(
            args.policy,
            args.redis,
            queues=[args.queues] if args.queues else None,
            pool=args.pool,
            concurrency=args.concurrency,
            loglevel=args.loglevel,
            beat=not args.no_beat,
            follow_policy=not args.no_follow_policy,
        )
    except PolicyError as exc:
        sys.exit(exc.render())
    except ValueError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
