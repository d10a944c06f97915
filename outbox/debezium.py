"""The Debezium connector and outbox event router config for our table."""

import re

from django.db import connections, router

from idempotency.shared.headers import EVENT_HEADERS

from .models import OutboxMessage


def connector_config(
    *, name: str = "once-outbox", topic_prefix: str = "once", using: str | None = None
) -> dict:
    """Return the Kafka Connect JSON that streams ``outbox_message`` via CDC."""
    using = using or router.db_for_write(OutboxMessage)
    db = connections[using].settings_dict
    table = f"{_schema(using)}.{OutboxMessage._meta.db_table}"
    return {
        "name": name,
        "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": db.get("HOST") or "localhost",
            "database.port": str(db.get("PORT") or 5432),
            "database.user": db.get("USER") or "postgres",
            # Never print a secret: Kafka Connect resolves this placeholder.
            "database.password": "${file:/kafka/secrets/outbox.properties:password}",
            "database.dbname": db["NAME"],
            "topic.prefix": topic_prefix,
            "table.include.list": table,
            "publication.autocreate.mode": "filtered",
            "slot.name": _slot_name(name),
            # record() deletes each row in its inserting transaction: the
            # delete is expected and must not become a tombstone.
            "tombstones.on.delete": "false",
            # Keeps the replication slot moving when the outbox is quiet, so
            # the WAL of other tables is not retained.
            "heartbeat.interval.ms": "10000",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "id",
            "transforms.outbox.table.field.event.key": "aggregateid",
            "transforms.outbox.table.field.event.payload": "payload",
            "transforms.outbox.route.by.field": "aggregatetype",
            "transforms.outbox.route.topic.replacement": (
                "outbox.event.${routedByValue}"
            ),
            # The event type travels as a header, and the event's own headers
            # (the message id and the once-intent among them) in one header of
            # their own, like our relay sends them; the inbox looks there.
            "transforms.outbox.table.fields.additional.placement": (
                f"type:header:type,headers:header:{EVENT_HEADERS}"
            ),
            "transforms.outbox.table.expand.json.payload": "true",
            # The trace context record() writes in Debezium mode (the
            # router's default column, named so it cannot drift): the
            # router's span continues the request's trace.
            "transforms.outbox.tracing.span.context.field": "tracingspancontext",
            # No table.field.event.timestamp: the router needs a timestamp
            # without time zone and created_at has one; it uses the change
            # event's time instead.
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        },
    }


def _slot_name(name: str) -> str:
    """The connector's replication slot: PostgreSQL allows lower case letters,
    digits and "_", at most 63 of them, and Debezium refuses any other."""
    return re.sub(r"[^a-z0-9_]", "_", name.lower())[:58] + "_slot"


def _schema(using: str) -> str:
    """The schema the outbox table is in, as the connection's search_path
    finds it: not always "public" (PostgreSQL 15 lets no role create there,
    and a role's own schema, "$user", comes first on the default path)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        # Debezium reads PostgreSQL only (outbox.E011 refuses the mode
        # elsewhere): the config keeps the default schema, as it always did.
        return "public"
    table = connection.ops.quote_name(OutboxMessage._meta.db_table)
    with connection.cursor() as cursor:
        # Not migrated yet: the schema migrate would create it in.
        cursor.execute(
            "SELECT COALESCE((SELECT n.nspname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)), "
            "current_schema())",
            [table],
        )
        return cursor.fetchone()[0]


def uncaptured(using: str) -> str | None:
    """Why nothing can be capturing the events record() writes on ``using``
    (a PostgreSQL database), or None.

    record() deletes each row it inserts: only logical decoding of the WAL,
    through a replication slot on this database, ever sees the event. A
    server that cannot decode (wal_level below "logical"), or a database no
    connector has created its slot on yet, loses every event recorded.
    """
    wal_level, slot = _capture_state(using)
    name = connections[using].settings_dict["NAME"]
    if wal_level != "logical":
        return (
            f"OUTBOX['RELAY'] is 'debezium', but the server of database "
            f"{name!r} has wal_level {wal_level!r}: Debezium decodes the WAL "
            "only at 'logical', and record() deletes each row it inserts, so "
            "every event would be lost."
        )
    if not slot:
        return (
            f"OUTBOX['RELAY'] is 'debezium', but database {name!r} has no "
            "logical replication slot: no connector captures its WAL yet, and "
            "each event recorded before its slot exists is lost."
        )
    return None


def _capture_state(using: str) -> tuple[str, bool]:
    """The server's wal_level, and whether a logical slot decodes ``using``."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('wal_level'), EXISTS (SELECT 1 FROM "
            "pg_replication_slots WHERE slot_type = 'logical' "
            "AND database = current_database())"
        )
        wal_level, slot = cursor.fetchone()
    return wal_level, slot
