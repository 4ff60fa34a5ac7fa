"""What the Celery side is configured with: the queue and task name, the broker and delivery settings,
and the ``Settings`` the app carries. Imported by the app, the pump and the tasks alike, so none of
them imports another to reach these."""

from __future__ import annotations

from typing import Any

from celery import Celery

from evomem.runtime import broker_redis_url
from evomem.settings import Settings

QUEUE = "evomem.consolidate"
#: The one task: drain the event stream for a while (named after its queue).
TASK_NAME = "evomem.consolidate"


def broker_url(url: str) -> str:
    """kombu spells a unix socket ``redis+socket:///path``."""
    return "redis+socket://" + url[len("unix://") :] if url.startswith("unix://") else url


def celery_config(settings: Settings) -> dict[str, Any]:
    """The delivery settings of DESIGN §5, with one visibility timeout wherever it lives."""
    transport = {"visibility_timeout": settings.visibility_timeout_s}
    soft = settings.batch_time_limit_s
    return {
        "broker_url": broker_url(broker_redis_url(settings)),
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "visibility_timeout": settings.visibility_timeout_s,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,  # a Redis restart is waited out, not fatal
        "task_ignore_result": True,
        "task_acks_late": True,  # ack after the batch, not before
        "task_reject_on_worker_lost": True,  # a killed process's task is redelivered ...
        "task_acks_on_failure_or_timeout": True,  # ... an exception is not: the stream keeps the events
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_soft_time_limit": soft,
        "task_time_limit": soft + 30,
        "worker_soft_shutdown_timeout": 15.0,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_hijack_root_logger": False,
        # task events (a few small messages per batch task) from the start, so Flower sees every
        # task, not only those after it first asks the workers to send them
        "worker_send_task_events": True,
        "task_default_queue": QUEUE,
        "task_serializer": "json",
        "accept_content": ["json"],
        "evomem_settings": settings,
    }


def settings_of(celery_app: Celery) -> Settings:
    settings = celery_app.conf.get("evomem_settings")
    return settings if isinstance(settings, Settings) else Settings()


__all__ = ["QUEUE", "TASK_NAME", "broker_url", "celery_config", "settings_of"]
