"""System checks for the OUTBOX settings."""

from celery import current_app
from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router

from idempotency.shared.checks import base_app_installed, celery_broker_configured

from .api import debezium_unsupported
from .conf import CELERY, DEBEZIUM, outbox_settings
from .debezium import uncaptured
from .models import OutboxMessage
from .publishers import CeleryTaskPublisher, InMemoryPublisher, KombuPublisher
from .relay import lapsing_lease, make_publisher

RELAY_TASK = "outbox.relay"

check_base_app = base_app_installed("outbox", "outbox.E008")
_check_broker = celery_broker_configured("outbox.api.record()", "outbox.W003")


def check_relay_kick(app_configs=None, **kwargs):
    """record() kicks the relay task after each commit: it needs a broker."""
    try:
        merged = outbox_settings.merged()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if merged["RELAY"] != CELERY or not merged["KICK_ON_COMMIT"]:
        return []
    return _check_broker()


def check_settings(app_configs=None, **kwargs):
    return outbox_settings.check()


def check_publisher(app_configs=None, **kwargs):
    try:
        merged = outbox_settings.merged()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    try:
        publisher = merged["PUBLISHER"](**merged["PUBLISHER_OPTIONS"])
    except (TypeError, ValueError, ImproperlyConfigured) as exc:
        return [
            Error(
                "OUTBOX['PUBLISHER_OPTIONS'] do not fit the publisher.",
                hint=f"{type(exc).__name__}: {exc}",
                id="outbox.E005",
            )
        ]
    if merged["RELAY"] != DEBEZIUM and (why := lapsing_lease(publisher)):
        return [
            Error(
                "OUTBOX['LEASE'] lapses while the publisher awaits the broker.",
                hint=why,
                id="outbox.E012",
            )
        ]
    unknown = (
        publisher.unregistered_tasks()
        if merged["RELAY"] != DEBEZIUM and isinstance(publisher, CeleryTaskPublisher)
        else []
    )
    if unknown:
        return [
            Error(
                "The CeleryTaskPublisher names tasks this Celery app does "
                f"not know: {', '.join(unknown)}.",
                hint="A worker would discard their messages. Correct the "
                "names, or pass remote_tasks=True if another codebase's "
                "workers define them.",
                id="outbox.E009",
            )
        ]
    return []


def check_destination(app_configs=None, **kwargs):
    """A KombuPublisher that declares no queue publishes nowhere until a
    consumer binds one: every publish fails meanwhile."""
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
        relay = outbox_settings.merged()["RELAY"]
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if relay != DEBEZIUM:
        return []
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


def check_debezium_database(app_configs=None, **kwargs):
    """Debezium mode needs PostgreSQL's WAL: elsewhere record() would delete
    every event it inserts with nothing to capture it; refuse it."""
    try:
        outbox_settings.merged()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    why = debezium_unsupported(router.db_for_write(OutboxMessage))
    if why is None:
        return []
    return [Error(why, id="outbox.E011")]


def check_debezium_capture(app_configs=None, databases=None, **kwargs):
    """``check --deploy --database ALIAS``: in Debezium mode, the outbox's
    PostgreSQL database is decoded by a connector's slot. record() deletes
    every row it inserts, so an event recorded before the slot exists (or on
    a server whose wal_level cannot be decoded) is gone."""
    try:
        relay = outbox_settings.merged()["RELAY"]
    except ImproperlyConfigured:
        return []  # reported by check_settings
    using = router.db_for_write(OutboxMessage)
    if relay != DEBEZIUM or using not in (databases or ()):
        return []  # a check asks only the databases it is given
    if connections[using].vendor != "postgresql":
        return []  # outbox.E011
    why = uncaptured(using)
    if why is None:
        return []
    return [
        Error(
            why,
            hint="Set wal_level = logical and start the connector "
            "(manage.py outbox_debezium_config) before serving; silence "
            "outbox.E013 if its slot is on a standby (PostgreSQL 16+).",
            id="outbox.E013",
        )
    ]


def check_test_publisher(app_configs=None, **kwargs):
    """``check --deploy``: the InMemoryPublisher reports events published that
    stay in one process's memory; a deployment must not run it, allowed or not."""
    try:
        merged = outbox_settings.merged()
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if merged["RELAY"] == DEBEZIUM or not issubclass(
        merged["PUBLISHER"], InMemoryPublisher
    ):
        return []
    return [
        Error(
            "OUTBOX['PUBLISHER'] is the InMemoryPublisher, a test double.",
            hint="It marks events published that no consumer ever receives. "
            "Deploy with KombuPublisher, CeleryTaskPublisher or your own.",
            id="outbox.E010",
        )
    ]
