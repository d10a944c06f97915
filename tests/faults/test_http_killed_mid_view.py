"""A gunicorn worker dies inside a keyed request's transaction (atomic mode).

Rule 8: a crash at any point leaves no effect (rolled back) or the effect
plus its record. Before the commit nothing stays, not even the claim, so the
retry runs as the first request did; after it, the retry replays
(``test_http_worker_killed``).
"""

import http.client
import json

import pytest

from idempotency.models import IdempotencyRecord
from outbox.models import OutboxMessage
from tests.testapp.crashes import CRASH_AT, CRASH_ONCE
from tests.testapp.models import Order

from .processes import gunicorn
from .test_http_worker_killed import post

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("point", ["before:order", "after:order"])
def test_a_worker_killed_before_the_commit_leaves_nothing_and_the_retry_runs(
    make_user, tmp_path, point
):
    make_user("alice")
    env = {CRASH_AT: point, CRASH_ONCE: str(tmp_path / "crashed")}
    with gunicorn(env=env) as base:
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            post(base, "order-1")
        assert (tmp_path / "crashed").exists()  # it died there
        assert Order.objects.count() == 0
        assert OutboxMessage.objects.count() == 0
        assert IdempotencyRecord.objects.count() == 0  # the claim rolled back too

        status, headers, body = post(base, "order-1")
        replay = post(base, "order-1")

    assert status == 201
    assert "Idempotent-Replayed" not in headers
    assert json.loads(body)["id"] == Order.objects.get().pk
    assert OutboxMessage.objects.filter(type="order.created").count() == 1
    assert (replay[0], replay[1]["Idempotent-Replayed"]) == (201, "true")
    assert replay[2] == body
