"""The outbox's signals and logs: sent after the commit, never at its expense."""

import logging

import pytest
from django.contrib.auth.models import Permission
from django.db import DatabaseError, connection, transaction
from django.test.utils import override_settings

from outbox import relay
from outbox.api import record
from outbox.exceptions import PublishError
from outbox.models import OutboxMessage
from outbox.publishers import InMemoryPublisher
from tests.signals import listening, receiver_errors

from .conftest import IN_MEMORY

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


class Refusing(InMemoryPublisher):
    def publish(self, message):
        raise PublishError("no room")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_recorded_is_sent_when_the_transaction_commits_and_not_before(asynchronous):
    with listening(asynchronous=asynchronous) as heard:
        with transaction.atomic():
            message_id = record("order", 7, "order.created", {"n": 1})
            assert heard == []
        assert heard.of("event_recorded") == [
            {
                "aggregate_type": "order",
                "event_type": "order.created",
                "message_id": str(message_id),
            }
        ]


def test_nothing_is_sent_for_a_rolled_back_event():
    with listening() as heard, pytest.raises(Boom), transaction.atomic():
        record("order", 7, "order.created", {"n": 1})
        raise Boom

    assert heard == []
    assert not OutboxMessage.objects.exists()


def test_a_raising_receiver_never_breaks_record_or_a_relay_batch(sent, caplog):
    with listening(raising=True) as heard:
        with transaction.atomic():
            record("order", 7, "order.created", {"n": 1})
            record("order", 8, "order.created", {"n": 2})
        result = relay.drain(publisher=InMemoryPublisher(allow_in_memory=True))

    assert result.published == 2
    assert len(sent) == 2
    assert OutboxMessage.objects.published().count() == 2
    assert heard.names() == ["event_recorded", "event_recorded", "events_published"]
    [published] = heard.of("events_published")
    assert published["count"] == 2
    assert all(lag >= 0 for lag in published["lags"])
    assert len(receiver_errors(caplog)) == 3


@override_settings(OUTBOX={**IN_MEMORY, "MAX_ATTEMPTS": 2})
def test_a_failed_publish_backs_off_then_dies_each_logged_once(
    make_messages, clock, caplog
):
    caplog.set_level(logging.WARNING, logger="outbox")
    (message,) = make_messages(1)
    with listening() as heard:
        relay.drain(publisher=Refusing(allow_in_memory=True))
        clock.advance(hours=1)
        relay.drain(publisher=Refusing(allow_in_memory=True))

    assert heard.names() == ["publish_failed", "event_dead"]
    expected = {
        "aggregate_type": "order",
        "event_type": "order.created",
        "message_id": str(message.id),
        "error": "PublishError: no room",
    }
    assert heard.of("publish_failed") == [{**expected, "attempts": 1}]
    assert heard.of("event_dead") == [{**expected, "attempts": 2}]
    logged = [r for r in caplog.records if r.name == "outbox"]
    assert [r.levelname for r in logged] == ["WARNING", "ERROR"]
    assert {r.message_id for r in logged} == {str(message.id)}


def test_an_operators_requeue_is_sent_with_the_operator(
    client, make_user, make_messages
):
    operator = make_user("operator", is_staff=True)
    for codename in ("view_outboxmessage", "requeue_outboxmessage"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(operator)
    (dead,) = make_messages(1, state=OutboxMessage.State.DEAD)

    with listening() as heard:
        client.post(
            "/admin/outbox/outboxmessage/",
            {"action": "requeue", "_selected_action": [dead.pk]},
        )

    assert heard.of("events_requeued") == [
        {"count": 1, "user": operator, "message_ids": [str(dead.id)]}
    ]


@pytest.fixture
def refusing_to_publish_poison():
    """A trigger: PostgreSQL refuses to mark the event of aggregate "poison"
    published (a write-back statement that fails, for real)."""
    table = OutboxMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'poison refused'; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER refuse_poison BEFORE UPDATE ON {table} FOR EACH ROW "
            "WHEN (NEW.aggregateid = 'poison' AND NEW.state = 'published') "
            "EXECUTE FUNCTION refuse_poison()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER refuse_poison ON {table}")
        cursor.execute("DROP FUNCTION refuse_poison()")


@pytest.mark.postgresql
def test_events_a_write_back_chunk_committed_are_sent_when_a_later_chunk_fails(
    refusing_to_publish_poison, monkeypatch, sent
):
    monkeypatch.setattr(relay, "WRITE_BACK_CHUNK", 2)
    for aggregate_id in ("1", "2", "poison"):
        with transaction.atomic():
            record("order", aggregate_id, "order.created", {"n": 1})

    with listening() as heard, pytest.raises(DatabaseError, match="poison refused"):
        relay.drain(publisher=InMemoryPublisher(allow_in_memory=True))

    published = OutboxMessage.objects.published()
    assert sorted(published.values_list("aggregateid", flat=True)) == ["1", "2"]
    # The first chunk's two events went out and their mark committed.
    [batch] = heard.of("events_published")
    assert batch["count"] == 2
    assert len(batch["lags"]) == 2


@pytest.mark.parametrize("robust", [False, True], ids=["plain", "robust"])
def test_a_callers_hook_raising_before_record_drops_recorded_unless_robust(robust):
    # As docs/observability.md says: Django drops the hooks queued after one
    # that raises; a robust one logs instead.
    def enqueue_with_the_broker_down():
        raise Boom

    with listening() as heard:
        try:
            with transaction.atomic():
                transaction.on_commit(enqueue_with_the_broker_down, robust=robust)
                record("order", 7, "order.created", {"n": 1})
        except Boom:
            assert not robust

    assert OutboxMessage.objects.count() == 1
    assert heard.names() == (["event_recorded"] if robust else [])
