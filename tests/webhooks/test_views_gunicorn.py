"""Chunked deliveries through a real WSGI server (gunicorn), for real.

Without Content-Length, Django's request reads an empty body; gunicorn
de-chunks the input and ends it, so the intake reads it within the limit.
"""

import http.client
import json
from urllib.parse import urlsplit

import pytest

from tests.faults.processes import gunicorn
from tests.webhooks import signing
from webhooks.models import WebhookReceipt

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def server(django_db_setup):
    with gunicorn(settings="tests.webhooks.server_settings") as base:
        yield urlsplit(base).port


def send_chunked(port, body, headers, chunk_size=100):
    """POST ``body`` in chunks (Transfer-Encoding: chunked, no Content-Length)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    chunks = (body[i : i + chunk_size] for i in range(0, len(body), chunk_size))
    try:
        connection.request(
            "POST",
            "/webhooks/github/",
            body=chunks,
            headers={**headers, "Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_signed_chunked_delivery_is_read_and_accepted(server):
    body = signing.event_body("evt_chunked", padding="x" * 1000)
    status, answer = send_chunked(
        server, body, signing.github_headers(body, delivery_id="evt_chunked")
    )

    assert status == 202, answer
    assert json.loads(answer)["delivery_id"] == "evt_chunked"
    receipt = WebhookReceipt.objects.get()
    assert bytes(receipt.body) == body


def test_a_chunked_body_over_the_limit_is_413_and_read_no_further(server):
    # tests/webhooks/server_settings.py sets MAX_BODY_SIZE to 4096 bytes.
    body = signing.event_body(padding="x" * 5000)
    status, answer = send_chunked(server, body, signing.github_headers(body))

    assert status == 413, answer
    assert json.loads(answer)["type"].endswith("/webhook-too-large")
    assert not WebhookReceipt.objects.exists()
