"""Sending signals: after the commit, robustly; the purge's own signal."""

import logging
from datetime import timedelta

import pytest
from django.db import OperationalError, transaction
from django.dispatch import Signal
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared import retention
from idempotency.shared.signals import Reporter, send, send_on_commit
from tests.signals import ReceiverFailed, listening, receiver_errors

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


@pytest.fixture
def signal():
    heard = []
    made = Signal()

    def receiver(signal, sender, **kwargs):
        heard.append(kwargs)

    made.connect(receiver, weak=False)
    made.heard = heard
    return made


def test_send_on_commit_waits_for_the_commit_and_drops_a_rollback(signal):
    with transaction.atomic():
        send_on_commit(signal, None, using="default", n=1)
        assert signal.heard == []
    with pytest.raises(Boom), transaction.atomic():
        send_on_commit(signal, None, using="default", n=2)
        raise Boom

    assert signal.heard == [{"n": 1}]


def test_a_raising_receiver_is_logged_and_the_others_still_run(signal, caplog):
    def broken(sender, **kwargs):
        raise ReceiverFailed

    def after(sender, **kwargs):
        signal.heard.append("after")

    signal.connect(broken, weak=False)
    signal.connect(after, weak=False)

    send(signal, None, n=1)

    assert signal.heard == [{"n": 1}, "after"]
    assert len(receiver_errors(caplog)) == 1


def test_a_reporter_logs_the_decision_with_its_fields_then_sends_them(signal, caplog):
    caplog.set_level(logging.INFO, logger="outbox")
    report = Reporter("outbox", "outbox.OutboxMessage")
    report(signal, logging.INFO, "Did %(what)s", what="it")
    report(signal, None, "Logged already", what="again")

    [log] = caplog.records
    assert (log.name, log.getMessage(), log.what) == ("outbox", "Did it", "it")
    assert signal.heard == [{"what": "it"}, {"what": "again"}]


def test_an_operators_action_is_logged_as_theirs_where_the_app_decided(signal, caplog):
    caplog.set_level(logging.INFO, logger="outbox")
    report = Reporter("outbox", "outbox.OutboxMessage")

    def requeued():
        report.operator_action(
            signal, "ann", ["a", "b"], "requeued %(count)s event(s)", ids=["a", "b"]
        )
        report(signal, logging.INFO, "Did %(what)s", what="it")

    requeued()

    action, decision = caplog.records
    assert action.getMessage() == "ann requeued 2 event(s)"
    assert action.levelno == logging.INFO
    # Both name the app's function, not the reporter's.
    assert (action.funcName, decision.funcName) == ("requeued", "requeued")
    assert signal.heard[0] == {"count": 2, "user": "ann", "ids": ["a", "b"]}


def expired_keys(*keys):
    now = timezone.now()
    for key in keys:
        IdempotencyRecord.objects.create(
            scope="user:1",
            operation="op",
            key=key,
            request_hash="h",
            created_at=now - timedelta(days=2),
            expires_at=now - timedelta(seconds=1),
        )


def test_the_purge_sends_each_kind_it_deleted_from_with_its_rows():
    expired_keys("a", "b")

    with listening() as heard:
        retention.purge()
        retention.purge()  # nothing left: nothing to say

    assert heard == [("purged", {"kind": "idempotency", "rows": 2})]


def test_a_purge_that_fails_midway_still_reports_the_rows_it_deleted(monkeypatch):
    # Each batch commits on its own: what a later batch's failure (the
    # database gone, a task's time limit) leaves deleted is deleted.
    expired_keys("a", "b")
    delete_batch = retention._delete_batch
    batches = []

    def second_batch_fails(rows, using):
        batches.append(rows)
        if len(batches) == 2:
            raise OperationalError("the database went away")
        return delete_batch(rows, using)

    monkeypatch.setattr(retention, "_delete_batch", second_batch_fails)

    with listening() as heard, pytest.raises(OperationalError):
        retention.purge(only=["idempotency"], batch_size=1, pause=0)

    assert IdempotencyRecord.objects.count() == 1
    assert heard == [("purged", {"kind": "idempotency", "rows": 1})]


def test_a_purge_in_a_transaction_that_rolls_back_sends_nothing():
    # Inside a caller's transaction the batches commit with it, or not at all:
    # a rollback leaves every row, so no receiver (no counter) may hear of it.
    expired_keys("a", "b")

    with listening() as heard:
        with pytest.raises(Boom), transaction.atomic():
            retention.purge(only=["idempotency"], pause=0)
            assert heard == []
            raise Boom
        assert IdempotencyRecord.objects.count() == 2
        with transaction.atomic():
            retention.purge(only=["idempotency"], pause=0)
            assert heard == []

    assert heard == [("purged", {"kind": "idempotency", "rows": 2})]
