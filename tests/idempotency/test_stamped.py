"""Excluded fields in a real view: a retry with a new client timestamp replays."""

import pytest

from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


def test_retry_with_a_new_client_timestamp_replays(api):
    api.post("/t/stamped/", {"name": "a", "client_ts": 1}, key="k")
    retry = api.post("/t/stamped/", {"client_ts": 2, "name": "a"}, key="k")

    assert retry["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1
