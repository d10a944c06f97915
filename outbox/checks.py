"""System checks for the OUTBOX settings."""

from datetime import timedelta

from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .conf import DEBEZIUM, RELAYS, outbox_settings

RELAY_TASK = "outbox.relay"


def check_settings(app_configs=None, **kwargs):
    try:
        merged = {**outbox_settings.defaults, **outbox_settings.user_settings}
    except ImproperlyConfigured as exc:
        return [
            Error(str(exc), hint="See the README's Outbox section.", id="outbox.E001")
        ]
    errors = []
    if merged["RELAY"] not in RELAYS:
        errors.append(
            Error(
                f"OUTBOX['RELAY'] must be one of {', '.join(RELAYS)}.",
                hint="'celery' runs our relay; 'debezium' leaves it to CDC.",
                id="outbox.E002",
            )
        )
    for name in ("BATCH_SIZE", "MAX_ATTEMPTS"):
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append(
                Error(
                    f"OUTBOX['{name}'] must be a positive integer.",
                    hint="For example 500.",
                    id="outbox.E003",
                )
            )
    for name in ("LEASE", "BACKOFF_BASE", "BACKOFF_MAX", "TIME_BUDGET", "RETENTION"):
        if not _positive_duration(merged[name]):
            errors.append(
                Error(
                    f"OUTBOX['{name}'] must be a positive duration.",
                    hint="Give seconds (a number) or a timedelta.",
                    id="outbox.E004",
                )
            )
    return errors


def check_publisher(app_configs=None, **kwargs):
    from .publishers import BasePublisher, KombuPublisher

    try:
        merged = {**outbox_settings.defaults, **outbox_settings.user_settings}
        cls = merged["PUBLISHER"]
        cls = import_string(cls) if isinstance(cls, str) else cls
        if not (isinstance(cls, type) and issubclass(cls, BasePublisher)):
            raise TypeError(cls)
        publisher = cls(**merged["PUBLISHER_OPTIONS"])
    except (ImproperlyConfigured, ImportError, TypeError, ValueError):
        return [
            Error(
                "OUTBOX['PUBLISHER'] is not a usable BasePublisher subclass.",
                hint="Give a dotted path, and options its __init__ accepts.",
                id="outbox.E005",
            )
        ]
    if (
        merged["RELAY"] != DEBEZIUM
        and isinstance(publisher, KombuPublisher)
        and not publisher.confirm_publish
        and publisher.is_amqp()
    ):
        return [
            Warning(
                "The outbox publishes to RabbitMQ without publisher confirms.",
                hint="A lost publish would count as published; set "
                "PUBLISHER_OPTIONS['confirm_publish'] = True.",
                id="outbox.W001",
            )
        ]
    return []


def check_destination(app_configs=None, **kwargs):
    """A KombuPublisher that declares no queue publishes nowhere until a
    consumer binds one: every publish fails meanwhile."""
    from .publishers import KombuPublisher
    from .relay import make_publisher

    try:
        if outbox_settings.RELAY == DEBEZIUM:
            return []
        publisher = make_publisher()
    except (ImproperlyConfigured, ImportError, TypeError, ValueError):
        return []  # reported by check_settings and check_publisher
    if isinstance(publisher, KombuPublisher) and not publisher.destinations():
        return [
            Warning(
                "The outbox's KombuPublisher declares no queue to publish into.",
                hint="Until a consumer binds a queue, every publish fails; keep "
                "default_queue=True or give declare=[Queue(...)].",
                id="outbox.W002",
            )
        ]
    return []


def check_relays(app_configs=None, **kwargs):
    """Debezium and our relay on one table would publish every event twice and
    fight over the rows; refuse it."""
    try:
        relay = outbox_settings.user_settings.get("RELAY")
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if relay != DEBEZIUM:
        return []
    from celery import current_app

    schedule = current_app.conf.beat_schedule or {}
    if any(entry.get("task") == RELAY_TASK for entry in schedule.values()):
        return [
            Error(
                "OUTBOX['RELAY'] is 'debezium' but beat also runs outbox.relay.",
                hint="Run one relay per table: drop the beat entry or use 'celery'.",
                id="outbox.E006",
            )
        ]
    return []


def _positive_duration(value) -> bool:
    if isinstance(value, timedelta):
        return value > timedelta(0)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0
