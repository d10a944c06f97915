"""manage.py outbox_debezium_config on a database it cannot reach."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

GONE = "gone"


@pytest.fixture
def unreachable_database():
    """An alias whose server refuses connections (a wrong port, say). Not a
    django_db test: its test case would refuse the alias before the server
    could."""
    connections.settings[GONE] = {**connections.settings["default"], "PORT": "1"}
    try:
        yield GONE
    finally:
        connections[GONE].close()
        del connections[GONE]
        del connections.settings[GONE]


@pytest.mark.postgresql
def test_an_unreachable_database_is_a_readable_error(
    unreachable_database, django_db_blocker
):
    # It asks the database for the table's schema: a traceback of
    # OperationalError said nothing of which alias or what to do.
    with (
        django_db_blocker.unblock(),
        pytest.raises(
            CommandError, match=r"(?s)database 'gone': .*refused.*--database"
        ),
    ):
        call_command("outbox_debezium_config", "--database", unreachable_database)
