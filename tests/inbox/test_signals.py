"""The inbox's signals and logs: sent when the consumer's work commits."""

import logging

import pytest
from django.db import transaction

from inbox.api import consumer
from inbox.models import InboxMessage
from tests.signals import listening, receiver_errors
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


@consumer("stock", message_id="message_id")
def apply(*, message_id, fail=False):
    Widget.objects.create(name=message_id)
    if fail:
        raise Boom


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_received_after_the_commit_then_a_redelivery_is_dropped(asynchronous):
    with listening(asynchronous=asynchronous) as heard:
        with transaction.atomic():
            apply(message_id="m1")
            assert heard == []
        apply(message_id="m1")

    assert heard == [
        ("message_received", {"subscriber": "stock", "message_id": "m1"}),
        ("duplicate_dropped", {"subscriber": "stock", "message_id": "m1"}),
    ]


def test_nothing_is_sent_when_the_consumer_raises():
    with listening() as heard, pytest.raises(Boom):
        apply(message_id="m1", fail=True)

    assert heard == []
    assert not InboxMessage.objects.exists()


def test_a_raising_receiver_never_breaks_a_consumer(caplog):
    with listening(raising=True) as heard:
        apply(message_id="m1")
        apply(message_id="m1")

    assert Widget.objects.count() == 1
    assert InboxMessage.objects.get().duplicates == 1
    assert heard.names() == ["message_received", "duplicate_dropped"]
    assert len(receiver_errors(caplog)) == 2


def test_each_decision_is_logged_once_with_the_subscriber_and_message_id(caplog):
    caplog.set_level(logging.DEBUG, logger="inbox")
    apply(message_id="m1")
    apply(message_id="m1")

    logged = [r for r in caplog.records if r.name == "inbox"]
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("DEBUG", "Applying m1 for stock"),
        ("INFO", "Dropped a redelivery of m1 to stock"),
    ]
    assert {(r.subscriber, r.message_id) for r in logged} == {("stock", "m1")}


def run_its_last_attempt(tmp_path, message_id):
    """A consumer task's last attempt, raising: its message is buried dead."""
    from inbox.conf import inbox_settings
    from tests.inbox.consumers import flaky

    flaky.apply(
        kwargs={
            "payload": {"runs": str(tmp_path / "runs"), "failures": 9},
            "headers": {"once-message-id": message_id},
        },
        task_id=f"t-{message_id}",
        retries=inbox_settings.MAX_ATTEMPTS - 1,
    )


def test_a_consumer_task_whose_attempts_ran_out_says_the_message_is_dead(tmp_path):
    # A decision like the outbox's event_dead: without a signal no receiver
    # (and no counter) heard of it, only the gauge at the next scrape.
    from inbox.conf import inbox_settings

    with listening() as heard:
        run_its_last_attempt(tmp_path, "m-dead")

    assert InboxMessage.objects.dead().get().message_id == "m-dead"
    [dead] = heard.of("message_dead")
    assert dead == {
        "subscriber": "inbox-tests.flaky",
        "message_id": "m-dead",
        "attempts": inbox_settings.MAX_ATTEMPTS,
        "error": "RuntimeError('flaky run 1')",
    }


def test_a_message_applied_before_its_failed_run_is_buried_is_not_said_dead(
    tmp_path, monkeypatch
):
    # Another delivery applied it between this run's failure and its burial:
    # the row stays applied, and no receiver may count it dead.
    from inbox.api import receive
    from inbox.querysets import InboxMessageManager

    bury = InboxMessageManager.bury

    def applied_meanwhile(self, subscriber, message_id, *args, **kwargs):
        with receive(subscriber, message_id):
            pass
        return bury(self, subscriber, message_id, *args, **kwargs)

    monkeypatch.setattr(InboxMessageManager, "bury", applied_meanwhile)

    with listening() as heard:
        run_its_last_attempt(tmp_path, "m-raced")

    assert InboxMessage.objects.get().state == "applied"
    assert heard.of("message_dead") == []
