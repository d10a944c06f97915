"""System checks for the IDEMPOTENCY settings."""

import re
from datetime import timedelta

from django.core.checks import Error
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .conf import idempotency_settings
from .responses import NEVER_REPLAYED

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def check_settings(app_configs=None, **kwargs):
    try:
        user = idempotency_settings.user_settings
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc),
                hint="See the settings table in the README.",
                id="idempotency.E001",
            )
        ]
    merged = {**idempotency_settings.defaults, **user}
    errors = []
    if not isinstance(merged["HEADER"], str) or not _TOKEN.match(merged["HEADER"]):
        errors.append(
            Error(
                "IDEMPOTENCY['HEADER'] is not a valid header name.",
                hint="Use a token such as 'Idempotency-Key'.",
                id="idempotency.E002",
            )
        )
    for name, code in (("TTL", "E003"), ("WAIT", "E004"), ("LEASE", "E005")):
        if not _positive_duration(merged[name]):
            errors.append(
                Error(
                    f"IDEMPOTENCY['{name}'] must be a positive duration.",
                    hint="Give seconds (a number) or a timedelta.",
                    id=f"idempotency.{code}",
                )
            )
    for name, code in (("SCOPE_RESOLVER", "E006"), ("STORE_STATUS", "E007")):
        if not _importable_callable(merged[name]):
            errors.append(
                Error(
                    f"IDEMPOTENCY['{name}'] is not an importable callable.",
                    hint="Give a dotted path to a function.",
                    id=f"idempotency.{code}",
                )
            )
    headers = merged["REPLAY_HEADERS"]
    if not isinstance(headers, list | tuple) or not all(
        isinstance(h, str) for h in headers
    ):
        errors.append(
            Error(
                "IDEMPOTENCY['REPLAY_HEADERS'] must be a list of names.",
                hint="For example ['ETag'].",
                id="idempotency.E008",
            )
        )
    elif any(h.lower() in NEVER_REPLAYED for h in headers):
        errors.append(
            Error(
                "IDEMPOTENCY['REPLAY_HEADERS'] lists Set-Cookie.",
                hint="Cookies are never stored or replayed; remove it.",
                id="idempotency.E009",
            )
        )
    cap = merged["ANONYMOUS_MAX_KEYS"]
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        errors.append(
            Error(
                "IDEMPOTENCY['ANONYMOUS_MAX_KEYS'] must be a positive int.",
                hint="For example 10000.",
                id="idempotency.E010",
            )
        )
    return errors


def _positive_duration(value) -> bool:
    if isinstance(value, timedelta):
        return value > timedelta(0)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _importable_callable(value) -> bool:
    if callable(value):
        return True
    try:
        return callable(import_string(value))
    except (ImportError, TypeError, ValueError):
        return False
