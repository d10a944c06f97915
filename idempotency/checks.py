"""System checks for the IDEMPOTENCY settings: the validators of ``conf``."""

from .conf import idempotency_settings


def check_settings(app_configs=None, **kwargs):
    return idempotency_settings.check()
