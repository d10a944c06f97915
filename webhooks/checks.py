"""System checks for the WEBHOOKS settings: the validators the server runs."""

from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed, celery_broker_configured

from . import kicks, sources, tasks
from .conf import webhooks_settings

check_base_app = base_app_installed("webhooks", "webhooks.E015")
_check_broker = celery_broker_configured("The webhook intake", "webhooks.W003")


def check_settings(app_configs=None, **kwargs):
    return webhooks_settings.check_values(_check_sources)


def _check_sources(values):
    # Each source as the server builds it, RETENTION's bounds included.
    return [
        problem.as_check()
        for name, config in values["SOURCES"].items()
        for problem in sources.validate(name, config)[1]
    ]


def check_enqueue(app_configs=None, **kwargs):
    """The bundled ENQUEUEs send Celery tasks: they need a broker."""
    try:
        enqueue = webhooks_settings.merged()["ENQUEUE"]
    except ImproperlyConfigured:
        return []  # reported by check_settings
    return _check_broker() if enqueue in (kicks.enqueue, tasks.enqueue) else []
