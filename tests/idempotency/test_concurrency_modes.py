"""Same-key races in lease and steps modes, and races of different payloads
under one key in every mode: real threads, connections and commits."""

import json
import uuid

import pytest

from tests.conftest import ApiClient, run_concurrently
from tests.testapp import steps_views
from tests.testapp.downstream import provider
from tests.testapp.models import Widget

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

CLIENTS = 8
ROUNDS = 5


@pytest.fixture(autouse=True)
def _reset_steps_views():
    steps_views.reset()
    yield
    steps_views.reset()


def race(user, url, body_of):
    """``CLIENTS`` clients send one new key at once, ``ROUNDS`` times; each
    round's answers, with what ran (the answers the view gave, not replays)."""
    clients = [ApiClient(user.username) for _ in range(CLIENTS)]
    for _round in range(ROUNDS):
        key = str(uuid.uuid4())
        answers = run_concurrently(
            CLIENTS, lambda i, key=key: clients[i].post(url, body_of(i), key=key)
        )
        ran = [
            a
            for a in answers
            if a.status_code == 201 and "Idempotent-Replayed" not in a
        ]
        yield answers, ran


@pytest.mark.parametrize("url", ["/t/charge/", "/t/payment/"])
def test_identical_requests_at_once_run_once_and_charge_once(user, url):
    for answers, ran in race(user, url, lambda i: {"amount": 5}):
        statuses = sorted(a.status_code for a in answers)
        assert len(ran) == 1, statuses
        for answer in answers:
            assert answer.status_code in (201, 409), statuses
            if answer.status_code == 409:
                assert answer["Retry-After"].isdigit()
            elif answer is not ran[0]:
                assert answer.content == ran[0].content
    assert len(provider.charges) == Widget.objects.count() == ROUNDS


@pytest.mark.parametrize("url", ["/t/widgets/", "/t/charge/", "/t/payment/"])
def test_different_payloads_under_one_key_at_once_run_one_of_them(user, url):
    def body_of(i):
        return {"name": f"n{i}", "amount": i + 1}

    for answers, ran in race(user, url, body_of):
        statuses = sorted(a.status_code for a in answers)
        assert len(ran) == 1, statuses
        # Never a replay: each other payload is refused or told to wait.
        assert [a for a in answers if a.status_code == 201] == ran, statuses
        for answer in answers:
            assert answer.status_code in (201, 409, 422), statuses
            if answer.status_code == 422:
                problem = json.loads(answer.content)
                assert problem["type"].endswith("/key-reused")
    assert Widget.objects.count() == ROUNDS
