"""System checks for the INBOX settings and the consumer tasks."""

from celery import current_app
from django.conf import settings
from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed
from idempotency.shared.workers import import_task_modules

from .api import ConsumerTask
from .conf import inbox_settings, short_retention

check_base_app = base_app_installed("inbox", "inbox.E003")


def check_settings(app_configs=None, **kwargs):
    return inbox_settings.check_values(_retention_outlasts_redeliveries)


def _retention_outlasts_redeliveries(values):
    why = short_retention(values["RETENTION"], values["REDELIVERY_HORIZON"])
    return [Error(why, id="inbox.E004")] if why else []


def check_consumer_tasks(app_configs=None, **kwargs):
    """Every Celery task running an ``@consumer`` has the inbox's wiring:
    without it, a consumer that raises has its message acked and lost."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    import_task_modules(app)
    errors = []
    for name, task in sorted(app.tasks.items()):
        if not hasattr(task.run, "subscriber"):
            continue  # not an @consumer
        missing = missing_wiring(task)
        if missing:
            errors.append(
                Error(
                    f"Celery task {name!r} runs an @consumer without "
                    f"{', '.join(missing)}.",
                    hint="Declare it with inbox.api.consumer_task, or give "
                    "@shared_task base=inbox.api.ConsumerTask, and keep its acks "
                    "and retries.",
                    id="inbox.E006",
                )
            )
    return errors


def refuse_unwired_consumers(**kwargs) -> None:
    """Stop a worker that would run an ``@consumer`` task without its wiring
    (``inbox.E006``): it would ack and lose every message whose consumer
    raises. A ``worker_init`` receiver, so before any message is taken.

    Celery's Django fix-up runs the system checks in a worker and drops their
    result, and Celery logs and drops what a signal receiver raises: only an
    exit stops it.
    """
    silenced = set(settings.SILENCED_SYSTEM_CHECKS)
    errors = [error for error in check_consumer_tasks() if error.id not in silenced]
    if errors:
        raise SystemExit(
            "\n".join(f"{error.id}: {error.msg} {error.hint}" for error in errors)
        )


def refuse_refused_settings(**kwargs) -> None:
    """Stop a worker whose INBOX settings are refused, before it takes a
    message (a ``worker_init`` receiver). A ConsumerTask reads them when its
    consumer raises: refused there, each failed message was requeued at once
    and refused again, for ever."""
    try:
        inbox_settings.merged()
    except ImproperlyConfigured as refused:
        raise SystemExit(str(refused)) from None


def missing_wiring(task) -> list[str]:
    """What ``task`` lacks of ConsumerTask's acks, retries and dead state."""
    missing = []
    if not isinstance(task, ConsumerTask):
        missing.append("base=ConsumerTask (retries, then a dead row)")
    if not task.acks_late:
        missing.append("acks_late")
    if not task.reject_on_worker_lost:
        missing.append("reject_on_worker_lost")
    if task.acks_on_failure_or_timeout:
        missing.append("acks_on_failure_or_timeout=False")
    if isinstance(task, ConsumerTask):
        # Celery's own retries fight the inbox's. Once used up, its retry()
        # raises instead of retrying: ConsumerTask requeues the message as if
        # its worker died, never buries its error.
        if task.max_retries is not None:
            missing.append("max_retries=None (INBOX['MAX_ATTEMPTS'] bounds its runs)")
        # With max_retries None, autoretry retries for ever: never dead.
        if getattr(task, "autoretry_for", ()):
            missing.append(
                "autoretry_for (ConsumerTask retries, then buries the message)"
            )
    return missing
