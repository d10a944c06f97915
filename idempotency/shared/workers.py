"""What a Celery worker knows at start, for checks that run elsewhere, and
how a task that found its work held elsewhere comes back for it."""

import logging
import weakref
from typing import NoReturn

from celery import Celery, Task
from celery.exceptions import Ignore, Reject

# The AMQP delivery mode a broker keeps on disk.
PERSISTENT = 2

# The Celery apps whose task modules this process has imported.
_imported: "weakref.WeakSet[Celery]" = weakref.WeakSet()


def import_task_modules(app: Celery) -> None:
    """Import the task modules as a worker does at start (the app's
    ``autodiscover_tasks`` packages, then ``imports``), once per process.

    A worker has them all; ``manage.py check`` or a web process may have none
    yet. Marked first: the import runs Django's system checks (Celery's
    Django fix-up), which ask again and must not import again.
    """
    if app.loader.worker_initialized or app in _imported:
        return
    _imported.add(app)
    app.loader.import_default_modules()


def come_back(
    task: Task, countdown: float | None, reason: object, logger: logging.Logger
) -> NoReturn:
    """Send ``task``'s message again in ``countdown`` seconds at the same
    attempt, and ack this copy, which ran nothing: another worker holds the
    work under a live lease. Celery's ``retry()`` would count an attempt, and
    a copy held off for as many leases as it has retries would make its first
    real run its last (one failure, and its unit is given up). ``reason``
    is logged."""
    try:
        # The request's own options, its retries among them, as retry()
        # sends them.
        task.signature_from_request(countdown=countdown).apply_async()
    except Exception as problem:
        # Requeued, never acked unsent.
        raise Reject(problem, requeue=True) from problem
    logger.info(
        "%s[%s] comes back in %s s: %s",
        task.name,
        task.request.id,
        countdown,
        reason,
        extra={"task": task.name, "task_id": task.request.id},
    )
    raise Ignore()


class PersistentTask(Task):
    """A task sent persistent whatever ``task_default_delivery_mode`` says.

    Its message (a retry above all: the failed run is acked once it is sent)
    is the only copy of some work; a transient one lives in the broker's
    memory and dies with a broker restart, unrecorded.
    """

    def apply_async(self, *args, **options):
        options["delivery_mode"] = PERSISTENT
        return super().apply_async(*args, **options)
