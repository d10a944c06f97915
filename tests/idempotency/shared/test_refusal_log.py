"""A refused setting is visible in a production server's output.

Under gunicorn with ``DEBUG = False`` and no ``LOGGING``, Django logs a 500
only to ``mail_admins``: without our own ERROR line an operator would see
nothing but the 500s.
"""

import urllib.request
from urllib.error import HTTPError

import pytest

from tests.faults.processes import gunicorn

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def test_a_refused_setting_leaves_an_error_line_with_no_logging_configured(
    tmp_path,
):
    output = tmp_path / "stderr"
    with (
        output.open("w") as stderr,
        gunicorn(
            settings="tests.idempotency.shared.refused_settings", stderr=stderr
        ) as base,
    ):
        request = urllib.request.Request(
            base + "/t/plain/",
            data=b'{"name": "w"}',
            headers={"Idempotency-Key": "k-1", "Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)

    assert refused.value.code == 500
    printed = output.read_text()
    assert "django-once refuses this configuration" in printed
    assert "IDEMPOTENCY['TTL']" in printed
