"""Retention: a key is remembered for its TTL, then forgotten."""

import pytest

from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


def test_within_the_ttl_a_retry_never_runs_again(api, clock):
    api.post("/t/widgets/", {"name": "a"}, key="k")
    clock.advance(hours=23, minutes=59)

    assert (
        api.post("/t/widgets/", {"name": "a"}, key="k")["Idempotent-Replayed"] == "true"
    )
    assert Widget.objects.count() == 1


def test_past_expires_at_a_late_retry_runs_as_new(api, clock):
    api.post("/t/widgets/", {"name": "a"}, key="k")
    clock.advance(hours=24, seconds=1)

    late = api.post("/t/widgets/", {"name": "a"}, key="k")

    assert late.status_code == 201
    assert "Idempotent-Replayed" not in late
    assert Widget.objects.count() == 2
    record = IdempotencyRecord.objects.get()
    assert record.state == "completed"
    assert record.expires_at > clock.now()


def test_an_expired_key_may_carry_a_new_payload(api, clock):
    api.post("/t/widgets/", {"name": "a"}, key="k")
    clock.advance(days=2)

    assert api.post("/t/widgets/", {"name": "b"}, key="k").status_code == 201


def test_ttl_per_view_overrides_the_setting(api, clock, user):
    api.client.force_login(user)
    api.post("/t/function/", {"name": "a"}, key="k")  # ttl=60 on the view
    clock.advance(seconds=61)

    assert "Idempotent-Replayed" not in api.post("/t/function/", {"name": "a"}, key="k")
    assert Widget.objects.count() == 2


def test_ttl_setting_in_seconds(api, clock, settings):
    settings.IDEMPOTENCY = {"TTL": 60}  # the floor: a shorter TTL is refused
    api.post("/t/widgets/", {"name": "a"}, key="k")
    clock.advance(seconds=61)

    assert "Idempotent-Replayed" not in api.post("/t/widgets/", {"name": "a"}, key="k")
