"""The webhook intake of the fault tests: a signed GitHub delivery received
in the test process, its task left for the test to send to a worker."""

import pytest
from django.test import Client

from tests.webhooks import signing

ENQUEUED = []


def enqueue(receipt_id):
    """WEBHOOKS["ENQUEUE"] of these tests: the test sends the task itself."""
    ENQUEUED.append(receipt_id)


@pytest.fixture
def intake(settings, django_capture_on_commit_callbacks):
    """``intake(delivery_id, event="push")``: receive one delivery; return the
    id of its stored receipt."""
    ENQUEUED.clear()
    settings.WEBHOOKS = {
        "SOURCES": {
            "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
        },
        "ENQUEUE": f"{__name__}.enqueue",
    }

    def deliver(delivery_id, event="push"):
        body = signing.event_body(delivery_id)
        headers = signing.github_headers(body, delivery_id=delivery_id, event=event)
        with django_capture_on_commit_callbacks(execute=True):
            response = Client().post(
                "/webhooks/github/",
                body,
                content_type="application/json",
                headers=headers,
            )
        assert response.status_code == 202
        return ENQUEUED[-1]

    return deliver
