"""The Celery app of the probe workers; this module only builds it.

The broker is the state server (``DIRECTOR_REDIS_URL``, a Sentinel set's master when it
is a ``redis+sentinel://`` URL, followed through a failover; with the credentials of
``DIRECTOR_REDIS_USER`` / ``DIRECTOR_REDIS_PASSWORD_FILE`` when the URL has none: see
:mod:`state.credentials`); its keys and channels are under ``{prefix}:celery:``, where the
``worker`` ACL user may write them (:mod:`state.acl`). Results are ignored: probes write
to the shared state, never to Celery's result backend. Start a worker with beat::

    DIRECTOR_REDIS_URL=redis://127.0.0.1:6379/0 DIRECTOR_POLICY=policy.dp \\
        celery -A workers.app worker --beat -Q probes.us-east,probes.eu-west --pool threads -c 16

(``-Q`` lists the ``probes.<region>`` queues this worker serves: run a region's queue on
workers inside that region; run beat once per deployment.) ``director workers POLICY`` and
``python -m workers POLICY`` do the same with the queues taken from the policy.
"""

from __future__ import annotations

from celery import Celery

from state.acl import celery_prefix
from state.credentials import with_credentials
from state.sentinel_url import celery_broker
from workers import broker_transport  # noqa: F401  registers the broker URLs' scheme
from workers.config import WorkerSettings

BROKER_TIMEOUT_S = 5.0  # above kombu's 1 s BRPOP wait, so a consume never times out idle


def create_app(settings: WorkerSettings | None = None) -> Celery:
    """A Celery app for ``settings`` (default: from the environment); connects lazily."""
    settings = settings or WorkerSettings.from_env()
    broker, transport = celery_broker(with_credentials(settings.redis_url), BROKER_TIMEOUT_S)
    app = Celery("director-workers", broker=broker, include=["workers.tasks", "workers.heartbeat"])
    app.conf.update(
        task_ignore_result=True,
        result_backend=None,
        result_expires=None,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue="probes",
        task_acks_late=False,
        worker_prefetch_multiplier=4,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=True,
        # the broker's keys and channels under {prefix}:celery:, where the worker's ACL
        # user may write them
        broker_transport_options={**transport, "visibility_timeout": 60,
                                  "global_keyprefix": celery_prefix(settings.state_prefix)},
        broker_connection_timeout=BROKER_TIMEOUT_S,
        beat_scheduler="workers.beat:PolicyScheduler",
        director_settings=settings,
    )
    return app


app = create_app()
