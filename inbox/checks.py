"""System checks for the INBOX settings."""

from datetime import timedelta

from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.conf import as_timedelta

from .conf import inbox_settings


def check_settings(app_configs=None, **kwargs):
    try:
        merged = {**inbox_settings.defaults, **inbox_settings.user_settings}
        retention = as_timedelta(merged["RETENTION"])
        horizon = as_timedelta(merged["REDELIVERY_HORIZON"])
    except ImproperlyConfigured as exc:
        return [
            Error(str(exc), hint="See the README's Inbox section.", id="inbox.E001")
        ]
    except TypeError:
        return [
            Error(
                "INBOX['RETENTION'] and ['REDELIVERY_HORIZON'] must be durations.",
                hint="Give seconds (a number) or a timedelta.",
                id="inbox.E002",
            )
        ]
    horizon = max(horizon, _visibility_timeout())
    if retention < horizon:
        return [
            Warning(
                "INBOX['RETENTION'] is shorter than the redelivery horizon.",
                hint=f"A redelivery after {horizon} would run twice; keep ids "
                "at least that long.",
                id="inbox.W001",
            )
        ]
    return []


def _visibility_timeout() -> timedelta:
    # Redis and SQS redeliver an unacked message after this timeout.
    from celery import current_app

    options = current_app.conf.broker_transport_options or {}
    seconds = options.get("visibility_timeout") or 0
    return timedelta(seconds=seconds)
