"""System checks for the INBOX settings."""

from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed

from .conf import inbox_settings, short_retention

check_base_app = base_app_installed("inbox", "inbox.E003")


def check_settings(app_configs=None, **kwargs):
    errors = inbox_settings.check()
    if errors:
        return errors
    try:
        merged = inbox_settings.merged()
    except ImproperlyConfigured:  # pragma: no cover - reported above
        return []
    why = short_retention(merged["RETENTION"], merged["REDELIVERY_HORIZON"])
    if why:
        return [Error(why, id="inbox.E004")]
    return []
