"""The webhooks' counters: each intake decision by configured source, and
never a label value a request chose."""

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.idempotency.prometheus.scraping import scrape, value
from tests.webhooks import signing
from webhooks import processing
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = {
    "IDEMPOTENCY": {"METRICS": True},
    "WEBHOOKS": {
        "SOURCES": {
            "github": {"VERIFIER": "github", "SECRETS": [signing.GITHUB_SECRET]}
        },
        "ENQUEUE": "tests.webhooks.test_metrics.enqueue_nothing",
    },
}


def enqueue_nothing(receipt_id):
    """Processing is counted elsewhere; these tests count the intake."""


def deliver(client, body, headers, source="github"):
    return client.post(
        f"/webhooks/{source}/", body, content_type="application/json", headers=headers
    )


def test_accepted_duplicate_and_rejected_are_counted_per_source(client):
    body = signing.event_body("evt_metrics")
    signed = signing.github_headers(body, delivery_id="evt_metrics")
    with override_settings(**SETTINGS):
        before = scrape(client)
        assert deliver(client, body, signed).status_code == 202
        assert deliver(client, body, signed).status_code == 200
        forged = signing.github_headers(body, secret="wrong", delivery_id="evt_x")
        assert deliver(client, body, forged).status_code == 401
        after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    deliveries = "once_webhooks_deliveries_total"
    assert delta(deliveries, source="github", outcome="accepted") == 1
    assert delta(deliveries, source="github", outcome="duplicate") == 1
    rejected = {
        labels: count - value(before, name, **dict(labels))
        for (name, labels), count in after.items()
        if name == "once_webhooks_rejections_total"
    }
    assert {labels: n for labels, n in rejected.items() if n} == {
        (("reason", "bad-signature"), ("source", "github")): 1
    }


def test_a_source_named_in_the_url_only_never_becomes_a_label(client):
    with override_settings(**SETTINGS):
        answer = deliver(client, b"{}", {}, source="made-up-source-7f3a")
        text = client.get("/metrics").content.decode()

    assert answer.status_code == 404
    assert "made-up-source-7f3a" not in text
    assert 'source="unknown"' in text


def test_processing_is_counted_as_skipped_when_no_handler_is_registered(client):
    receipt = WebhookReceipt.objects.create(
        source="github",
        delivery_id="evt_unhandled",
        event_type="nobody.listens",
        body=b"{}",
        received_at=timezone.now(),
    )
    with override_settings(**SETTINGS):
        before = scrape(client)
        processing.process(receipt.pk)
        after = scrape(client)

    for outcome, count in [("skipped", 1), ("processed", 0)]:
        labels = {"source": "github", "outcome": outcome}
        name = "once_webhooks_deliveries_total"
        assert value(after, name, **labels) - value(before, name, **labels) == count
