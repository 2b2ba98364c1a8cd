"""Run a real Celery worker with beat for a pickled policy: ``python launch_worker.py FILE``.

Settings come from the DIRECTOR_* environment (see :mod:`workers.config`).
"""

from __future__ import annotations

import pickle
import sys

from workers.config import WorkerSettings
from workers.runner import run_worker

if __name__ == "__main__":
    with open(sys.argv[1], "rb") as file:
        policy = pickle.load(file)
    settings = WorkerSettings.from_env()
    run_worker(
        None,
        settings.redis_url,
        policy=policy,
        settings=settings,
        concurrency=4,
        loglevel="WARNING",
    )
