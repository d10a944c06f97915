"""One test per system check id of the outbox."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import override_settings
from kombu import Exchange, Queue

from outbox import checks, relay
from tests.servers import AMQP_URL

TASKS = {"order.created": "testapp.reserve_stock"}


def ids(messages):
    return [m.id for m in messages]


def all_checks():
    return [
        *checks.check_settings(),
        *checks.check_publisher(),
        *checks.check_destination(),
        *checks.check_relays(),
        *checks.check_debezium_database(),
    ]


def test_the_test_settings_pass():
    assert all_checks() == []


@override_settings(OUTBOX={"PUBLISHR": "x"})
def test_e001_unknown_setting():
    assert ids(checks.check_settings()) == ["outbox.E001"]


@override_settings(OUTBOX={"RELAY": "kafka"})
def test_e002_unknown_relay():
    assert ids(checks.check_settings()) == ["outbox.E002"]


@pytest.mark.parametrize("name", ["BATCH_SIZE", "MAX_ATTEMPTS"])
def test_e003_counts_must_be_positive(name):
    with override_settings(OUTBOX={name: 0}):
        assert ids(checks.check_settings()) == ["outbox.E003"]


def test_e003_a_batch_size_the_claim_cannot_take_is_refused():
    # Past PostgreSQL's bigint every relay run raised a DataError, while
    # manage.py check passed.
    with override_settings(OUTBOX={"BATCH_SIZE": 2**63}):
        assert ids(checks.check_settings()) == ["outbox.E003"]
    with override_settings(OUTBOX={"BATCH_SIZE": 100_000}):
        assert ids(checks.check_settings()) == []


@override_settings(OUTBOX={"LEASE": -1})
def test_e004_durations_must_be_positive():
    assert ids(checks.check_settings()) == ["outbox.E004"]


@pytest.mark.parametrize(
    "options",
    [
        {"PUBLISHER": "outbox.publishers.Nope"},
        {"PUBLISHER": "outbox.api.record"},
        {"PUBLISHER_OPTIONS": {"colour": "red"}},
    ],
)
def test_e005_unusable_publisher(options):
    with override_settings(OUTBOX=options):
        assert ids(all_checks()) == ["outbox.E005"]


@pytest.mark.parametrize(
    ("options", "error_id"),
    [
        ({"ORDERED": "yes"}, "outbox.E007"),
        ({"KICK_ON_COMMIT": 1}, "outbox.E007"),
        ({"LEASE": float("nan")}, "outbox.E004"),
        ({"RETENTION": 10**10}, "outbox.E004"),
    ],
)
def test_other_bad_values(options, error_id):
    with override_settings(OUTBOX=options):
        assert ids(checks.check_settings()) == [error_id]


def test_every_bad_value_is_reported_and_the_relay_refuses_to_run():
    from django.core.exceptions import ImproperlyConfigured

    from outbox import relay

    with override_settings(OUTBOX={"BATCH_SIZE": 0, "LEASE": 0, "RELAY": "x"}):
        assert sorted(ids(checks.check_settings())) == [
            "outbox.E002",
            "outbox.E003",
            "outbox.E004",
        ]
        with pytest.raises(ImproperlyConfigured, match="LEASE"):
            relay.drain()


@override_settings(OUTBOX={"PUBLISHER_OPTIONS": {"task": {}}})
def test_a_misspelled_publisher_option_stops_the_relay_with_a_readable_error():
    from outbox import relay
    from outbox.exceptions import OutboxConfigurationError

    with pytest.raises(OutboxConfigurationError, match=r"PUBLISHER_OPTIONS.*'task'"):
        relay.drain()


@override_settings(OUTBOX=["RELAY"])
def test_a_list_instead_of_a_dict_is_reported_not_a_crash():
    assert ids(all_checks()) == ["outbox.E001"]


def test_e005_rabbitmq_without_publisher_confirms_is_refused():
    publisher = "outbox.publishers.KombuPublisher"
    options = {"url": AMQP_URL, "confirm_publish": False}
    with override_settings(
        OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    ):
        assert ids(checks.check_publisher()) == ["outbox.E005"]
        assert "confirm_publish" in checks.check_publisher()[0].hint


@pytest.mark.parametrize(
    ("option", "value"), [("connect_timeout", "5"), ("default_queue", "false")]
)
def test_e005_a_kombu_option_of_the_wrong_type_is_refused(option, value):
    publisher = "outbox.publishers.KombuPublisher"
    options = {"url": AMQP_URL, option: value}
    with override_settings(
        OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    ):
        [error] = checks.check_publisher()
    assert error.id == "outbox.E005"
    assert option in error.hint


def test_e009_a_task_name_no_worker_of_this_app_runs():
    publisher = "outbox.publishers.CeleryTaskPublisher"
    typo = {"tasks": {"order.created": "shop.reserve_stok"}}
    with override_settings(OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": typo}):
        [error] = checks.check_publisher()
        assert error.id == "outbox.E009"
        assert "shop.reserve_stok" in error.msg
    known = {"tasks": {"order.created": "testapp.reserve_stock"}}
    remote = {**typo, "remote_tasks": True}
    for options in (known, remote):
        with override_settings(
            OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
        ):
            assert checks.check_publisher() == []


@pytest.mark.parametrize(
    ("publisher", "options", "waits"),
    [
        ("KombuPublisher", {"url": AMQP_URL}, 35),  # connect 5 s + confirms 30 s
        ("CeleryTaskPublisher", {"tasks": TASKS, "confirm_timeout": 45}, 45),
    ],
)
def test_e012_a_lease_that_lapses_while_the_broker_is_awaited(
    publisher, options, waits
):
    # A batch still awaiting its confirms after LEASE is claimed by the next
    # relay and published again; its attempts mount until it is dead.
    path = f"outbox.publishers.{publisher}"
    lapsing = {"PUBLISHER": path, "PUBLISHER_OPTIONS": options, "LEASE": waits}
    with override_settings(OUTBOX=lapsing):
        [error] = checks.check_publisher()
        assert error.id == "outbox.E012"
        assert f"({waits} s)" in error.hint
        with pytest.raises(ImproperlyConfigured, match=r"OUTBOX\['LEASE'\]"):
            relay.drain()
    with override_settings(OUTBOX={**lapsing, "LEASE": waits + 1}):
        assert checks.check_publisher() == []


@pytest.mark.parametrize("options", [{}, {"tasks": {}}, {"queue": "orders"}])
@pytest.mark.django_db
def test_e005_a_celery_publisher_with_no_tasks_has_nowhere_to_deliver(options):
    # Rule 9: it passed the check, the relay ran, and every event failed "no
    # task" until it was dead, hours later.
    from outbox.models import OutboxMessage

    publisher = "outbox.publishers.CeleryTaskPublisher"
    outbox = {"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    refused_by_the_check_and_the_relay(outbox, "needs tasks")
    [message] = OutboxMessage.objects.all()
    assert message.attempts == 0
    assert message.published_at is None


ORDERS = Exchange("outbox", type="topic")


@pytest.mark.parametrize(
    ("queue", "reason"),
    [
        ("billing", "not a kombu Queue"),
        (Queue("billing", ORDERS, routing_key="order", durable=False), "durable"),
        (
            Queue("billing", ORDERS, routing_key="order", auto_delete=True),
            "auto_delete",
        ),
        (Queue("billing", ORDERS, routing_key="order", exclusive=True), "exclusive"),
        (
            Queue("billing", ORDERS, routing_key="order", message_ttl=3600),
            "message_ttl",
        ),
        (Queue("billing", ORDERS, routing_key="order", expires=3600), "expires"),
        (Queue("billing", ORDERS, routing_key="order", max_length=1000), "max_length"),
        (
            Queue("billing", ORDERS, routing_key="order", max_length_bytes=2**20),
            "max_length_bytes",
        ),
        (
            Queue("billing", ORDERS, queue_arguments={"x-message-ttl": 60_000}),
            "x-message-ttl",
        ),
        (
            Queue("billing", ORDERS, queue_arguments={"x-max-length": 10}),
            "x-max-length",
        ),
    ],
)
@pytest.mark.django_db
def test_e005_a_declared_queue_that_drops_confirmed_events_is_refused(queue, reason):
    # "Published" means a queue holds the message: one that forgets it (on a
    # broker restart, when its consumer leaves, after a TTL, past a length)
    # lets the relay mark events published that no consumer ever receives.
    publisher = "outbox.publishers.KombuPublisher"
    options = {"declare": [queue], "default_queue": False}
    refused_by_the_check_and_the_relay(
        {"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}, reason
    )


@pytest.mark.django_db
def test_e005_a_celery_queue_that_drops_its_tasks_is_refused():
    from celery import Celery

    app = Celery(set_as_current=False)
    app.conf.task_queues = [Queue("events", ORDERS, routing_key="#", expires=600)]
    options = {"tasks": TASKS, "queue": "events", "app": app}
    publisher = "outbox.publishers.CeleryTaskPublisher"
    refused_by_the_check_and_the_relay(
        {"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}, "expires"
    )


@pytest.mark.parametrize(
    "queue",
    [
        Queue("billing", ORDERS, routing_key="order"),
        # A full queue that refuses a publish makes the broker nack it: the
        # message stays pending and is published again later.
        Queue(
            "billing",
            ORDERS,
            routing_key="order",
            max_length=1000,
            queue_arguments={"x-overflow": "reject-publish"},
        ),
        Queue(
            "billing",
            ORDERS,
            queue_arguments={"x-max-length": 10, "x-overflow": "reject-publish-dlx"},
        ),
    ],
)
def test_a_declared_queue_that_keeps_what_it_confirms_passes(queue):
    publisher = "outbox.publishers.KombuPublisher"
    options = {"declare": [queue], "default_queue": False}
    with override_settings(
        OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    ):
        assert checks.check_publisher() == []


def refused_by_the_check_and_the_relay(outbox, reason):
    """Under ``outbox``, the check reports E005 naming ``reason``, and the
    relay refuses to run (rather than report an event published) once one is
    recorded."""
    from django.db import transaction

    from outbox.api import record
    from outbox.exceptions import OutboxConfigurationError

    with override_settings(OUTBOX=outbox):
        [error] = checks.check_publisher()
        assert error.id == "outbox.E005"
        assert reason in error.hint
        with transaction.atomic():
            record("order", 1, "order.created", {})
        with pytest.raises(OutboxConfigurationError, match=reason):
            relay.drain()


@pytest.mark.parametrize("remote_tasks", [False, True])
@pytest.mark.parametrize(
    "tasks",
    [
        {"order.created": ["testapp.reserve_stock"]},
        {"order.created": 5},
        {"order.created": ""},
        {5: "testapp.reserve_stock"},
    ],
)
def test_e005_a_task_or_event_type_that_is_no_name_is_refused(tasks, remote_tasks):
    # A list where a name belongs crashed the check (TypeError) and, with
    # remote_tasks, passed it: the relay would send tasks named by no string.
    publisher = "outbox.publishers.CeleryTaskPublisher"
    options = {"tasks": tasks, "remote_tasks": remote_tasks}
    with override_settings(
        OUTBOX={"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    ):
        [error] = checks.check_publisher()
    assert error.id == "outbox.E005"
    assert "tasks" in error.hint


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, []),  # the default queue
        ({"declare": [Queue("billing")]}, []),
        ({"default_queue": False}, ["outbox.W002"]),
        ({"exchange_type": "direct"}, ["outbox.W002"]),
    ],
)
def test_w002_a_kombu_publisher_without_a_destination_queue(options, expected):
    publisher = "outbox.publishers.KombuPublisher"
    outbox = {"PUBLISHER": publisher, "PUBLISHER_OPTIONS": options}
    with override_settings(OUTBOX=outbox):
        assert ids(checks.check_destination()) == expected
    with override_settings(OUTBOX={**outbox, "RELAY": "debezium"}):
        assert ids(checks.check_destination()) == []  # no relay, no publisher
    with override_settings(OUTBOX={**outbox, "PUBLISHER_OPTIONS": {"colour": 1}}):
        assert ids(checks.check_destination()) == []  # that is E005


def test_e006_debezium_and_the_celery_relay_on_one_table():
    from tests.celery import app

    saved = app.conf.beat_schedule
    try:
        app.conf.beat_schedule = {"relay": {"task": "outbox.relay", "schedule": 10}}
        with override_settings(OUTBOX={"RELAY": "debezium"}):
            assert ids(checks.check_relays()) == ["outbox.E006"]
        assert ids(checks.check_relays()) == []  # the Celery relay alone is fine
        app.conf.beat_schedule = {}
        with override_settings(OUTBOX={"RELAY": "debezium"}):
            assert ids(checks.check_relays()) == []  # Debezium alone is fine
    finally:
        app.conf.beat_schedule = saved


def test_w003_kicking_the_relay_without_a_celery_broker():
    from tests.celery import app

    saved = app.conf.broker_url
    try:
        app.conf.broker_url = None
        with override_settings(OUTBOX={"KICK_ON_COMMIT": True}):
            assert ids(checks.check_relay_kick()) == ["outbox.W003"]
        with override_settings(OUTBOX={"KICK_ON_COMMIT": False}):
            assert ids(checks.check_relay_kick()) == []
    finally:
        app.conf.broker_url = saved
    with override_settings(OUTBOX={"KICK_ON_COMMIT": True}):
        assert ids(checks.check_relay_kick()) == []


IN_MEMORY_PUBLISHER = "outbox.publishers.InMemoryPublisher"


@pytest.mark.parametrize(
    "options", [{}, {"allow_in_memory": False}, {"allow_in_memory": "true"}]
)
@pytest.mark.django_db
def test_e005_the_in_memory_publisher_outside_a_test_run(options, sent):
    from outbox.models import OutboxMessage

    outbox = {"PUBLISHER": IN_MEMORY_PUBLISHER, "PUBLISHER_OPTIONS": options}
    refused_by_the_check_and_the_relay(outbox, "allow_in_memory")
    assert OutboxMessage.objects.get().state == "pending"
    assert sent == []


def deploy_check_ids():
    from django.core.checks import run_checks

    return ids(run_checks(include_deployment_checks=True))


def test_e010_check_deploy_names_the_in_memory_publisher():
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    # The test settings allow it, which a deployment must never do.
    assert "outbox.E010" in deploy_check_ids()
    with pytest.raises(SystemCheckError, match="InMemoryPublisher"):
        call_command("check", "--deploy")
    assert checks.check_publisher() == []  # a plain check lets the tests run
    broker = {"PUBLISHER": "outbox.publishers.KombuPublisher"}
    with override_settings(OUTBOX=broker):
        assert "outbox.E010" not in deploy_check_ids()


def test_e011_debezium_mode_needs_postgresql():
    assert ids(checks.check_debezium_database()) == []  # the Celery relay
    with override_settings(OUTBOX={"RELAY": "debezium"}):
        found = ids(checks.check_debezium_database())
    # SQLite has no WAL for Debezium: every event record() deletes is lost.
    assert found == ([] if connection.vendor == "postgresql" else ["outbox.E011"])


DEBEZIUM = {"RELAY": "debezium"}


@pytest.mark.postgresql
@pytest.mark.django_db
def test_e013_check_deploy_with_the_database_asks_whether_the_wal_is_captured():
    # record() deletes each row it inserts in Debezium mode: on a server whose
    # wal_level cannot be decoded (PostgreSQL's default is "replica") every
    # event is lost. This server is not set up for logical decoding.
    with override_settings(OUTBOX=DEBEZIUM):
        [error] = checks.check_debezium_capture(databases=["default"])
        assert error.id == "outbox.E013"
        assert "wal_level" in error.msg
        # Without --database a check asks no database.
        assert checks.check_debezium_capture() == []
        assert checks.check_debezium_capture(databases=["other"]) == []
    assert checks.check_debezium_capture(databases=["default"]) == []  # Celery
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with (
        override_settings(OUTBOX=DEBEZIUM),
        pytest.raises(SystemCheckError, match=r"outbox\.E013"),
    ):
        call_command("check", "--deploy", "--database", "default")


@pytest.mark.postgresql  # elsewhere outbox.E011 refuses Debezium mode
@pytest.mark.parametrize(
    ("state", "said"),
    [
        (("replica", False), "wal_level"),
        (("logical", False), "no logical replication slot"),
        (("logical", True), None),
    ],
)
def test_e013_a_server_without_a_slot_captures_nothing_yet(monkeypatch, state, said):
    # A connector creates its slot when it first starts: every event recorded
    # before that (a deploy that switched RELAY first) is gone.
    from outbox import debezium

    monkeypatch.setattr(debezium, "_capture_state", lambda using: state)
    with override_settings(OUTBOX=DEBEZIUM):
        found = checks.check_debezium_capture(databases=["default"])
    if said is None:
        assert found == []
    else:
        [error] = found
        assert (error.id, said in error.msg) == ("outbox.E013", True)
