"""System checks for the WEBHOOKS settings: the validators the server runs."""

from datetime import timedelta

from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed, celery_broker_configured
from idempotency.shared.settings import Problem

from . import kicks, sources, tasks
from .conf import webhooks_settings

check_base_app = base_app_installed("webhooks", "webhooks.E015")
_check_broker = celery_broker_configured("The webhook intake", "webhooks.W003")

# Stripe retries a delivery for up to three days; a receipt purged sooner
# would let a late retry run its handlers a second time.
PROVIDER_RETRY_HORIZON = timedelta(days=3)


def check_settings(app_configs=None, **kwargs):
    messages = webhooks_settings.check()
    if messages:
        return messages
    try:
        merged = webhooks_settings.merged()
    except ImproperlyConfigured:  # pragma: no cover - reported above
        return []
    for name, config in merged["SOURCES"].items():
        _source, problems = sources.validate(name, config)
        messages.extend(
            problem.as_check() if isinstance(problem, Problem) else problem
            for problem in problems
        )
    if merged["RETENTION"] < PROVIDER_RETRY_HORIZON:
        messages.append(
            Warning(
                "WEBHOOKS['RETENTION'] is shorter than provider retries.",
                hint="Keep receipts at least 3 days (Stripe retries that "
                "long); the default is 30.",
                id="webhooks.W001",
            )
        )
    return messages


def check_enqueue(app_configs=None, **kwargs):
    """The bundled ENQUEUEs send Celery tasks: they need a broker."""
    try:
        enqueue = webhooks_settings.merged()["ENQUEUE"]
    except ImproperlyConfigured:
        return []  # reported by check_settings
    return _check_broker() if enqueue in (kicks.enqueue, tasks.enqueue) else []
