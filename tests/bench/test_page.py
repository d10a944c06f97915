"""The bench's page can be written after any one part: its header reads the
server's version on the maintenance database, not through Django's default
one, which a part run alone (``make bench PARTS=relay``) never creates."""

import pytest

from bench.__main__ import machine

pytestmark = pytest.mark.postgresql


def test_the_header_names_the_server_without_djangos_database():
    # No django_db mark: Django's connections refuse to be used here.
    assert "PostgreSQL " in machine()
