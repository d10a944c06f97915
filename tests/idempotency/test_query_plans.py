"""A key's reads, unlocked and locked, find the record through the key,
whatever the planner's statistics say.

After a deploy adds an operation, the statistics have not seen it until the
next ANALYZE, which autovacuum may run hours later on a large table (or never,
where it is off). An index led by ``operation`` then looked like the cheapest
way to a key, and each read walked every row of that operation.
"""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from tests.query_plans import captured, rows_walked_past

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

ROWS = 3000
NEW_OPERATION = "orders.create.v2"
TABLE = IdempotencyRecord._meta.db_table


@pytest.fixture
def unseen_operation():
    """ROWS keys of an operation the statistics have never seen."""
    now = timezone.now()

    def records(operation, count):
        return [
            IdempotencyRecord(
                scope="user:1",
                operation=operation,
                key=f"{operation}-{n}",
                request_hash="0" * 64,
                state=IdempotencyRecord.State.COMPLETED,
                status_code=201,
                response_body=b"{}",
                response_headers={},
                attempts=1,
                created_at=now,
                completed_at=now,
                expires_at=now + timedelta(days=1),
            )
            for n in range(count)
        ]

    IdempotencyRecord.objects.bulk_create(records("orders.create", ROWS))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {IdempotencyRecord._meta.db_table}")
    IdempotencyRecord.objects.bulk_create(records(NEW_OPERATION, ROWS))


def test_a_replay_read_goes_straight_to_its_key(unseen_operation):
    records = IdempotencyRecord.objects
    sql = captured(lambda: records.read_key("user:1", NEW_OPERATION, "absent"), TABLE)

    assert rows_walked_past(sql) == 0


def test_the_locked_read_of_a_taken_key_goes_straight_to_it(unseen_operation):
    # A claim that finds its key taken reads the record under a row lock.
    def lock():
        with transaction.atomic():
            IdempotencyRecord.objects.lock_key(
                "user:1", NEW_OPERATION, f"{NEW_OPERATION}-7", lock_timeout_ms=1000
            )

    assert rows_walked_past(captured(lock, TABLE)) == 0
