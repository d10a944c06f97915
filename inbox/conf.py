"""The INBOX settings dict, read through one settings object."""

from datetime import timedelta

from celery import current_app
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.settings import AppSettings, Option, duration, seconds

inbox_settings = AppSettings(
    "INBOX",
    {
        # How long a received message id is remembered.
        "RETENTION": Option(timedelta(days=30), duration, "inbox.E002"),
        # The longest a message can come back after its first delivery: broker
        # visibility timeout, Celery retries x backoff cap, a manual redrive.
        # The broker's visibility_timeout is added to the check when larger.
        "REDELIVERY_HORIZON": Option(timedelta(days=7), duration, "inbox.E002"),
    },
    shape_id="inbox.E001",
)


def visibility_timeout() -> timedelta:
    """The broker's visibility timeout: Redis and SQS redeliver an unacked
    message after it (0 when the broker has none)."""
    options = current_app.conf.broker_transport_options or {}
    timeout = options.get("visibility_timeout") or 0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return timedelta(0)  # not ours to validate; kombu reports it
    return timedelta(seconds=timeout)


def short_retention(retention: timedelta, horizon: timedelta) -> str | None:
    """Why ``retention`` cannot guard redeliveries, or None when it can."""
    timeout = visibility_timeout()
    if retention >= max(horizon, timeout):
        return None
    if timeout > horizon:
        bound = f"the broker's visibility_timeout ({seconds(timeout)})"
        remedy = "Keep ids at least that long."
    else:
        bound = f"REDELIVERY_HORIZON ({seconds(horizon)})"
        remedy = (
            "Keep ids at least that long, or lower REDELIVERY_HORIZON if "
            "redeliveries cannot come that late."
        )
    return (
        f"INBOX['RETENTION'] ({seconds(retention)}) is shorter than {bound}: "
        f"a message redelivered after its id was purged would run twice. {remedy}"
    )


def checked_retention() -> timedelta:
    """RETENTION, refused when a purge by it would forget ids too soon."""
    retention = inbox_settings.RETENTION
    if why := short_retention(retention, inbox_settings.REDELIVERY_HORIZON):
        raise ImproperlyConfigured(why)
    return retention
