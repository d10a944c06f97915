"""A step's recovery point finds its unit through the unit's identity,
whatever the planner's statistics say about the units' states.

After a burst of new units the statistics have not seen yet (the last
ANALYZE saw finished ones only), the units' state index looked like a cheap
way to a running unit, and each step walked every running unit.
"""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from idempotency.shared import steps
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.units import KEYS, Unit
from tests.query_plans import captured, rows_walked_past

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

ROWS = 3000
TABLE = UnitRecord._meta.db_table


def units(state, count, prefix):
    now = timezone.now()
    return [
        UnitRecord(
            id=f"{prefix}{n:060d}",
            kind=KEYS,
            intent="0" * 64,
            state=state,
            attempt=1,
            lease_expires_at=now + timedelta(minutes=1),
            created_at=now,
            updated_at=now,
        )
        for n in range(count)
    ]


@pytest.fixture
def unseen_running_units():
    """ROWS finished units the statistics have seen, then ROWS running ones
    they have not."""
    UnitRecord.objects.bulk_create(units(UnitRecord.State.DONE, ROWS, "done"))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {TABLE}")
    UnitRecord.objects.bulk_create(units(UnitRecord.State.RUNNING, ROWS, "run"))


def test_a_recovery_point_goes_straight_to_its_unit(unseen_running_units):
    handle = steps.begin(Unit(KEYS, ("plans", "a", "k")), "plans", lease=timedelta(1))

    sql = captured(lambda: handle.step("charge", lambda key: None), TABLE)

    assert rows_walked_past(sql) == 0


def test_finishing_a_unit_goes_straight_to_it(unseen_running_units):
    handle = steps.begin(Unit(KEYS, ("plans", "a", "k")), "plans", lease=timedelta(1))

    def finish():
        # Rolled back: the unit is still running when its statement runs again.
        with transaction.atomic():
            handle.finish()
            transaction.set_rollback(True)

    sql = captured(finish, TABLE)

    assert rows_walked_past(sql) == 0
