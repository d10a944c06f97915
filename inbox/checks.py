"""System checks for the INBOX settings."""

from datetime import timedelta

from celery import current_app
from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed
from idempotency.shared.settings import seconds

from .conf import inbox_settings

check_base_app = base_app_installed("inbox", "inbox.E003")


def check_settings(app_configs=None, **kwargs):
    errors = inbox_settings.check()
    if errors:
        return errors
    try:
        merged = inbox_settings.merged()
    except ImproperlyConfigured:  # pragma: no cover - reported above
        return []
    horizon = max(merged["REDELIVERY_HORIZON"], _visibility_timeout())
    if merged["RETENTION"] < horizon:
        return [
            Warning(
                "INBOX['RETENTION'] is shorter than the redelivery horizon.",
                hint=f"A redelivery after {seconds(horizon)} would run twice; "
                "keep ids at least that long.",
                id="inbox.W001",
            )
        ]
    return []


def _visibility_timeout() -> timedelta:
    # Redis and SQS redeliver an unacked message after this timeout.
    options = current_app.conf.broker_transport_options or {}
    timeout = options.get("visibility_timeout") or 0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return timedelta(0)  # not ours to validate; kombu reports it
    return timedelta(seconds=timeout)
