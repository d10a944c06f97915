"""System checks for the WEBHOOKS settings: the validators the server runs."""

from collections import defaultdict

from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.checks import base_app_installed, celery_broker_configured

from . import handlers, kicks, sources, tasks
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


def _configured_sources() -> dict | None:
    try:
        return webhooks_settings.merged()["SOURCES"]
    except ImproperlyConfigured:
        return None  # reported by check_settings


def check_stray_handlers(app_configs=None, **kwargs):
    """A handler registered for a source no setting configures never runs;
    processing fails that event type's deliveries instead of skipping them."""
    configured = _configured_sources()
    if configured is None:
        return []
    # A warning: a reusable app may ship handlers for a source this project
    # does not use; processing still refuses to skip what one was meant for.
    return [
        Warning(
            handlers.describe_stray(key, found) + ": it never runs.",
            hint="Register it under the source's name in WEBHOOKS['SOURCES'] "
            f"({', '.join(map(repr, configured)) or 'none configured'}).",
            id="webhooks.W004",
        )
        for key, found in handlers.stray(configured).items()
    ]


def check_unhandled_sources(app_configs=None, **kwargs):
    """A configured source with no handler skips every delivery: its handlers
    most likely live in a module nothing imports."""
    configured = _configured_sources()
    if configured is None:
        return []
    return [
        Warning(
            f"No handler is registered for source {source!r}: every delivery "
            "of it is skipped.",
            hint=f"Register its handlers with @on({source!r}, ...) in "
            f"{handlers.LOOKED_FOR}.",
            id="webhooks.W005",
        )
        for source in handlers.unhandled(configured)
    ]


def check_shared_secrets(app_configs=None, **kwargs):
    """A secret two sources share verifies a delivery signed for one at the
    other's URL too, where the other's handlers run it."""
    configured = _configured_sources()
    if configured is None:
        return []
    sharing = defaultdict(list)
    for name, config in configured.items():
        secrets = config.get("SECRETS") if isinstance(config, dict) else None
        if isinstance(secrets, list | tuple):  # else refused by check_settings
            for secret in set(secrets):
                sharing[secret].append(name)
    return [
        Warning(
            f"Sources {', '.join(map(repr, names))} share a secret: a delivery "
            "signed for one verifies at the others' URLs too, and runs their "
            "handlers.",
            hint="Give each source its own secret (providers issue one per endpoint).",
            id="webhooks.W006",
        )
        for names in sharing.values()
        if len(names) > 1
    ]
