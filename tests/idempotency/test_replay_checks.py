"""A replay passes authentication, permission and throttle checks first."""

import json

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache

from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clear_throttle_history():
    cache.clear()


def test_a_user_who_lost_the_permission_gets_403_not_the_stored_answer(api, user):
    user.user_permissions.add(Permission.objects.get(codename="add_widget"))
    assert api.post("/t/guarded/", {"name": "a"}, key="k").status_code == 201

    user.user_permissions.clear()
    replay = api.post("/t/guarded/", {"name": "a"}, key="k")

    assert replay.status_code == 403
    assert "Idempotent-Replayed" not in replay
    assert Widget.objects.count() == 1


def test_the_403_of_a_permission_check_is_never_stored(api, user):
    assert api.post("/t/guarded/", {"name": "a"}, key="k").status_code == 403
    assert IdempotencyRecord.objects.count() == 0

    user.user_permissions.add(Permission.objects.get(codename="add_widget"))
    assert api.post("/t/guarded/", {"name": "a"}, key="k").status_code == 201


def test_a_401_the_view_answers_is_not_stored_and_the_authenticated_retry_runs(
    api,
):
    refused = api.post("/t/step-up/", {"name": "a"}, key="k")
    retry = api.post("/t/step-up/", {"name": "a"}, key="k", **{"X-Otp": "123456"})

    assert refused.status_code == 401
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert Widget.objects.count() == 1  # the refused attempt's was rolled back


def test_a_throttled_replay_gets_429_and_the_429_is_never_stored(api):
    answers = [api.post("/t/throttled/", {"name": "a"}, key="k") for _ in range(4)]

    assert [a.status_code for a in answers] == [201, 201, 201, 429]
    assert answers[1]["Idempotent-Replayed"] == "true"
    record = IdempotencyRecord.objects.get()
    assert record.status_code == 201
    assert Widget.objects.count() == 1


def test_an_unauthenticated_replay_gets_401(api):
    from tests.conftest import ApiClient

    api.post("/t/widgets/", {"name": "a"}, key="k")
    stranger = ApiClient()
    answer = stranger.post("/t/widgets/", {"name": "a"}, key="k")

    assert answer.status_code in (401, 403)
    assert "Idempotent-Replayed" not in answer
    assert json.loads(answer.content) != json.loads(
        bytes(IdempotencyRecord.objects.get().response_body)
    )
