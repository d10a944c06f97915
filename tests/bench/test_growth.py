"""The growth bench's fill helpers: right rows, and the indexes put back."""

import pytest
from django.db import connection
from django.utils import timezone

from bench import growth
from idempotency.models import IdempotencyRecord
from outbox import relay
from outbox.models import OutboxMessage

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def _indexes(model):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s",
            [model._meta.db_table],
        )
        return {name for (name,) in cursor.fetchall()}


def _declared(model):
    """The indexes its migrations made: the model's own, by name."""
    meta = model._meta
    names = {f"{meta.db_table}_pkey"}
    return names | {item.name for item in [*meta.indexes, *meta.constraints]}


@pytest.fixture
def bulk_from_ten(monkeypatch):
    monkeypatch.setattr(growth, "BULK", 10)


def test_fill_keys_inserts_distinct_keys_about_half_expired(bulk_from_ten):
    growth.fill_keys(1, 1000)
    growth.fill_keys(1001, 1005)  # below BULK: straight into the indexes

    records = IdempotencyRecord.objects.all()
    assert records.count() == 1005
    assert records.values("key").distinct().count() == 1005
    assert 300 < records.filter(expires_at__lte=timezone.now()).count() < 700
    assert _indexes(IdempotencyRecord) == _declared(IdempotencyRecord)


def test_indexes_come_back_after_a_failed_fill():
    table_name = IdempotencyRecord._meta.db_table

    with (
        pytest.raises(ZeroDivisionError),
        connection.cursor() as cursor,
        growth.indexes_set_aside(cursor, table_name),
    ):
        assert _indexes(IdempotencyRecord) == {f"{table_name}_pkey"}
        1 / 0  # noqa: B018

    assert _indexes(IdempotencyRecord) == _declared(IdempotencyRecord)


def test_fill_backlog_adds_due_pending_messages_the_relay_claims(bulk_from_ten):
    growth.fill_backlog(50, "default")
    growth.fill_backlog(0, "default")

    assert OutboxMessage.objects.filter(state=OutboxMessage.State.PENDING).count() == 50
    assert len(relay.claim(100)) == 50
    assert _indexes(OutboxMessage) == _declared(OutboxMessage)
