"""The Celery app of the consolidation workers (broker: the same Redis as the memory).

Nothing is read from the environment at import: the configuration is built from ``Settings`` when
Celery first configures the app, so ``celery -A workers.app`` and ``evomem worker`` both work.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from evomem.settings import Settings
from workers.config import QUEUE, broker_url, celery_config, settings_of
from workers.pump import Pump

app = Celery("evomem", include=["workers.tasks"])
app.steps["worker"].add(Pump)


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    sender.conf.update(celery_config(Settings()))


__all__ = ["QUEUE", "app", "broker_url", "celery_config", "settings_of"]
