"""A steps consumer whose step calls out under a key of its own: the crash
case dies before the step's recovery point, and its report says which step
that point is, not only the library's SQL."""

import pytest
from django.db import connection

from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from tests.testing import broken
from tests.testing.helpers import broken_message, new_widget, widget_count

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_charge_under_its_own_key_is_reported_at_its_steps_recovery_point(fakes):
    charges = Consumer(
        broken.charges_under_its_own_key,
        "order.paid",
        lambda: {**new_widget(), "amount": 500},
        lambda: {"charges": fakes.effects.count("charge"), "notes": widget_count()},
    )

    message = broken_message(consumers.check_crash_anywhere, charges)

    points = dict(
        point.split(") ", 1)
        for point in message.splitlines()[1].split(": ", 1)[1].split("; ")
    )
    [charge] = [n for n, point in points.items() if "step 'charge'" in point]
    # PostgreSQL stores a recovery point in one statement; SQLite, which has
    # no UPDATE in a CTE, in a transaction of two.
    stored = (
        'autocommitted WITH … INSERT INTO "idempotency_steprecord"'
        if connection.vendor == "postgresql"
        else 'COMMIT of UPDATE "idempotency_unitrecord", '
        'INSERT INTO "idempotency_steprecord"'
    )
    assert points[charge] == f"{stored} (the recovery point of step 'charge')"
    assert (
        f"died just before durable point {charge}: {stored}, then redelivered: "
        "charges: the effect was applied twice"
    ) in message
