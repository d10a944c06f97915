"""An event recorded on a database other than the router's: its kick relays
it from that database, where it was written."""

import psycopg
import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.test.utils import override_settings

from outbox.api import record
from outbox.models import OutboxMessage

from .conftest import IN_MEMORY

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

OTHER = "other"


def _admin(sql):
    """Run ``sql`` on the server outside any database the tests use."""
    default = connections["default"].settings_dict
    with psycopg.connect(
        host=default["HOST"] or None,
        port=default["PORT"] or None,
        user=default["USER"],
        password=default["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(sql)


@pytest.fixture
def other_database():
    """A second PostgreSQL alias with the apps' tables, as a project with a
    database per tenant has: the router still names ``default``."""
    name = f"{connections['default'].settings_dict['NAME']}_{OTHER}"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _admin(f'CREATE DATABASE "{name}"')
    connections.settings[OTHER] = {
        **connections.settings["default"],
        "NAME": name,
    }
    try:
        # Connected here: the test case allows the aliases it knew of when it
        # started, and would refuse this one's first connection.
        connections[OTHER].connect()
        call_command("migrate", database=OTHER, verbosity=0)
        yield OTHER
    finally:
        connections[OTHER].close()
        del connections[OTHER]
        del connections.settings[OTHER]
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@override_settings(OUTBOX={**IN_MEMORY, "KICK_ON_COMMIT": True})
def test_an_event_recorded_on_another_database_is_published_by_its_kick(
    other_database, eager_celery, sent
):
    with transaction.atomic(using=other_database):
        message_id = record("order", 1, "order.created", {"n": 1}, using=other_database)

    # The kick's relay drained the database the event was written to; before,
    # it drained the router's, and the event waited there for ever (beat's
    # relay drains the router's too).
    assert [message.id for message in sent] == [str(message_id)]
    stored = OutboxMessage.objects.using(other_database).get()
    assert stored.state == OutboxMessage.State.PUBLISHED
