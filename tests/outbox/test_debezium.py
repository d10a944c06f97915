"""manage.py outbox_debezium_config prints a connector for our table."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import override_settings

# The command asks the database where the table is.
pytestmark = pytest.mark.django_db


def test_the_command_prints_the_connector_and_event_router_config():
    out = StringIO()
    call_command("outbox_debezium_config", "--name", "shop-outbox", stdout=out)

    config = json.loads(out.getvalue())
    assert config["name"] == "shop-outbox"
    c = config["config"]
    assert c["table.include.list"] == "public.outbox_message"
    assert c["tombstones.on.delete"] == "false"
    assert int(c["heartbeat.interval.ms"]) > 0
    assert c["transforms.outbox.type"] == "io.debezium.transforms.outbox.EventRouter"
    assert c["transforms.outbox.table.field.event.id"] == "id"
    assert c["transforms.outbox.table.field.event.key"] == "aggregateid"
    assert c["transforms.outbox.route.by.field"] == "aggregatetype"
    assert (
        "type:header:type" in c["transforms.outbox.table.fields.additional.placement"]
    )
    # A placeholder Kafka Connect resolves; never the database password.
    assert c["database.password"].startswith("${file:")


def test_the_events_headers_travel_in_one_header_as_the_relay_sends_them():
    from outbox.publishers import EVENT_HEADERS

    out = StringIO()
    call_command("outbox_debezium_config", stdout=out)

    c = json.loads(out.getvalue())["config"]
    placement = c["transforms.outbox.table.fields.additional.placement"]
    # The headers column as one header, never spread into headers of its own
    # that Kafka consumers or a router act on.
    assert placement.split(",") == [
        "type:header:type",
        f"headers:header:{EVENT_HEADERS}",
    ]


def test_the_router_reads_the_trace_context_from_the_column_record_writes():
    from outbox.models import OutboxMessage

    out = StringIO()
    call_command("outbox_debezium_config", stdout=out)

    c = json.loads(out.getvalue())["config"]
    column = c["transforms.outbox.tracing.span.context.field"]
    assert OutboxMessage._meta.get_field(column).column == "tracingspancontext"


@pytest.mark.parametrize(
    ("name", "slot"),
    [
        ("shop-outbox", "shop_outbox_slot"),
        ("ShopOutbox", "shopoutbox_slot"),
        ("shop.outbox v2", "shop_outbox_v2_slot"),
        ("s" * 80, "s" * 58 + "_slot"),
    ],
)
def test_the_slot_is_named_as_postgresql_allows_whatever_the_connector_name(name, slot):
    # PostgreSQL takes lower case letters, digits and "_", at most 63 of them
    # (Debezium refuses any other slot.name): a connector named "ShopOutbox"
    # must still get a config that starts.
    out = StringIO()
    call_command("outbox_debezium_config", "--name", name, stdout=out)

    config = json.loads(out.getvalue())
    assert config["name"] == name
    assert config["config"]["slot.name"] == slot


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--name", ""),
        ("--name", "   "),
        ("--topic-prefix", ""),
        ("--topic-prefix", "shop events"),
        ("--topic-prefix", "shop/events"),
        ("--topic-prefix", "a" * 250),
    ],
)
def test_a_name_or_topic_prefix_kafka_would_refuse_is_a_usage_error(option, value):
    # Printed, the config failed only when Kafka Connect refused it: an
    # empty connector name, or a topic prefix outside Kafka's topic names.
    out = StringIO()
    with pytest.raises(CommandError, match=f"argument {option}"):
        call_command("outbox_debezium_config", option, value, stdout=out)
    assert out.getvalue() == ""


def test_a_connector_for_a_table_the_celery_relay_drains_comes_with_a_warning():
    # Started beside the Celery relay, the connector publishes every event a
    # second time (check outbox.E006 refuses the converse: beat's relay in
    # Debezium mode). The config alone said nothing of it.
    out, err = StringIO(), StringIO()
    call_command("outbox_debezium_config", stdout=out, stderr=err)

    assert json.loads(out.getvalue())["name"] == "once-outbox"
    assert "OUTBOX['RELAY'] is 'celery'" in err.getvalue()
    with override_settings(OUTBOX={"RELAY": "debezium"}):
        err = StringIO()
        call_command("outbox_debezium_config", stdout=StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_an_unknown_database_alias_is_refused_naming_the_configured_ones():
    with pytest.raises(CommandError, match=r"invalid choice: 'nope'.*'default'"):
        call_command("outbox_debezium_config", "--database", "nope")


@pytest.mark.postgresql
def test_the_connector_names_the_schema_the_table_is_in():
    # PostgreSQL 15 lets no role create in "public": a role's own schema,
    # first on the default search_path ("$user"), then holds the tables, and
    # a connector capturing public.outbox_message would capture nothing.
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA once_shop")
        cursor.execute(
            "CREATE TABLE once_shop.outbox_message (LIKE public.outbox_message)"
        )
        cursor.execute("SET search_path TO once_shop, public")
    try:
        out = StringIO()
        call_command("outbox_debezium_config", stdout=out)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET search_path")

    c = json.loads(out.getvalue())["config"]
    assert c["table.include.list"] == "once_shop.outbox_message"
