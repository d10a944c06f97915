"""System checks for the WEBHOOKS settings."""

import re
from datetime import timedelta

from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.conf import as_timedelta

from .conf import SOURCE_DEFAULTS, webhooks_settings
from .sources import NEVER_STORED, verifier_class

# A source name is one URL path segment.
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
HINT = "See 'Adding a source' in the README."


def check_settings(app_configs=None, **kwargs):
    try:
        user = webhooks_settings.user_settings
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint=HINT, id="webhooks.E001")]
    sources = user.get("SOURCES", {})
    if not isinstance(sources, dict):
        return [
            Error(
                "WEBHOOKS['SOURCES'] must be a dict of name to settings.",
                hint=HINT,
                id="webhooks.E002",
            )
        ]
    errors = []
    for name, config in sources.items():
        errors.extend(_check_source(name, config))
    errors.extend(_check_retention(user.get("RETENTION", timedelta(days=30))))
    return errors


# Stripe retries a delivery for up to three days; a receipt purged sooner
# would let a late retry run its handlers a second time.
PROVIDER_RETRY_HORIZON = timedelta(days=3)


def _check_retention(value):
    try:
        retention = as_timedelta(value)
    except TypeError:
        retention = None
    if retention is None or retention <= timedelta(0):
        return [
            Error(
                "WEBHOOKS['RETENTION'] must be a positive duration.",
                hint="Give seconds or a timedelta.",
                id="webhooks.E012",
            )
        ]
    if retention < PROVIDER_RETRY_HORIZON:
        return [
            Warning(
                "WEBHOOKS['RETENTION'] is shorter than provider retries.",
                hint="Keep receipts at least 3 days (Stripe retries that "
                "long); the default is 30.",
                id="webhooks.W001",
            )
        ]
    return []


def _check_source(name, config):
    where = f"WEBHOOKS['SOURCES'][{name!r}]"
    if (
        not isinstance(name, str)
        or not _NAME.match(name)
        or not isinstance(config, dict)
    ):
        return [
            Error(
                f"{where} needs a slug name and a dict of settings.",
                hint="Lowercase letters, digits, '-' and '_'.",
                id="webhooks.E003",
            )
        ]
    unknown = sorted(set(config) - set(SOURCE_DEFAULTS))
    if unknown:
        return [
            Error(
                f"{where} has unknown keys: {', '.join(unknown)}.",
                hint=HINT,
                id="webhooks.E004",
            )
        ]
    merged = {**SOURCE_DEFAULTS, **config}
    errors = []
    try:
        cls = verifier_class(merged["VERIFIER"])
    except (ImportError, TypeError, ValueError):
        cls = None
        errors.append(
            Error(
                f"{where}['VERIFIER'] is not a known verifier.",
                hint="Use github, stripe, standard, hmac or a dotted path.",
                id="webhooks.E005",
            )
        )
    secrets = merged["SECRETS"]
    if (
        isinstance(secrets, str)
        or not isinstance(secrets, list | tuple)
        or not secrets
        or not all(isinstance(s, str) and s for s in secrets)
    ):
        errors.append(
            Error(
                f"{where} has no SECRETS.",
                hint="A list of secrets, newest first; every request is refused.",
                id="webhooks.E006",
            )
        )
        secrets = ()
    if not _positive_number(merged["TOLERANCE"]):
        errors.append(
            Error(
                f"{where}['TOLERANCE'] must be a positive number of seconds.",
                hint="Providers sign with a clock; 300 is their usual tolerance.",
                id="webhooks.E007",
            )
        )
    size = merged["MAX_BODY_SIZE"]
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        errors.append(
            Error(
                f"{where}['MAX_BODY_SIZE'] must be a positive integer.",
                hint="A number of bytes, for example 1048576.",
                id="webhooks.E008",
            )
        )
    headers = merged["HEADERS"]
    if isinstance(headers, str) or not all(isinstance(h, str) for h in headers):
        errors.append(
            Error(
                f"{where}['HEADERS'] must be a list of header names.",
                hint="For example ['User-Agent'].",
                id="webhooks.E009",
            )
        )
    elif any(h.lower() in NEVER_STORED for h in headers):
        errors.append(
            Error(
                f"{where}['HEADERS'] lists a credential header.",
                hint="Cookies and Authorization are never stored; remove it.",
                id="webhooks.E010",
            )
        )
    if cls is not None and isinstance(merged["OPTIONS"], dict):
        verifier = cls(
            secrets=secrets, tolerance=merged["TOLERANCE"], options=merged["OPTIONS"]
        )
        problems = verifier.check()
    elif not isinstance(merged["OPTIONS"], dict):
        problems = ["OPTIONS must be a dict"]
    else:
        problems = []
    errors.extend(
        Error(
            f"{where}: {problem}.",
            hint="See the verifier's documentation in the README.",
            id="webhooks.E011",
        )
        for problem in problems
    )
    return errors


def _positive_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
