"""A gunicorn worker dies after the order commits, before the response."""

import http.client
import json
from urllib.parse import urlsplit

import pytest

from tests.conftest import basic_auth
from tests.testapp.models import Order

from .processes import gunicorn

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

BODY = json.dumps({"sku": "BOOK-1", "quantity": 1})


def post(base, key, **headers):
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/api/orders/",
            body=BODY,
            headers={
                "Authorization": basic_auth("alice"),
                "Content-Type": "application/json",
                "Idempotency-Key": key,
                **headers,
            },
        )
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_retry_after_a_worker_killed_post_commit_replays_one_order(make_user):
    make_user("alice")
    with gunicorn() as base:
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            post(base, "order-1", **{"X-Test-Fault": "die-after-commit"})
        assert Order.objects.count() == 1  # committed, though the client never knew

        # gunicorn's arbiter replaces the dead worker; the client retries.
        status, headers, body = post(base, "order-1")

    assert status == 201
    assert headers["Idempotent-Replayed"] == "true"
    assert json.loads(body)["id"] == Order.objects.get().pk
    assert Order.objects.count() == 1
