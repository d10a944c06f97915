"""The kit signs as each provider does: the intake accepts its deliveries, and
the providers' own libraries verify them."""

import json
from datetime import datetime

import pytest
import standardwebhooks
import stripe

from webhooks.models import WebhookReceipt
from webhooks.testing.signing import CannotSign, sign, verifier_kind
from webhooks.verifiers.base import BaseVerifier, Delivery

from .test_deliveries import SOURCES

pytestmark = pytest.mark.django_db


class OwnVerifier(BaseVerifier):
    """A provider the kit does not know."""

    def verify(self, body, headers):
        return Delivery("own", "own")


@pytest.fixture(autouse=True)
def sources(settings):
    settings.WEBHOOKS = {
        "SOURCES": {
            **SOURCES,
            "custom": {
                "VERIFIER": "tests.webhooks.testing.test_signing.OwnVerifier",
                "SECRETS": ["x" * 32],
            },
        }
    }


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_the_intake_accepts_what_the_kit_signs(client, source):
    delivery = sign(source, {"hello": "world"}, event_type="kit.test")

    answer = client.post(
        f"/webhooks/{source}/",
        delivery.body,
        content_type=delivery.content_type,
        headers=delivery.headers,
    )

    assert answer.status_code == 202, answer.content
    assert answer.json()["delivery_id"] == delivery.delivery_id


@pytest.mark.parametrize("source", ["kit-stripe", "kit-standard"])
def test_without_use_tz_the_kit_signs_the_projects_local_time(client, settings, source):
    settings.USE_TZ = False
    settings.TIME_ZONE = "America/New_York"
    # Naive, in TIME_ZONE: how the project's own datetimes are then.
    occurred_at = datetime(2026, 1, 1, 7)
    delivery = sign(source, {"data": {}}, event_type="a.b", occurred_at=occurred_at)

    answer = client.post(
        f"/webhooks/{source}/",
        delivery.body,
        content_type=delivery.content_type,
        headers=delivery.headers,
    )

    assert answer.status_code == 202, answer.content
    assert WebhookReceipt.objects.get().occurred_at == occurred_at


def test_a_stripe_delivery_verifies_with_stripes_library():
    delivery = sign("kit-stripe", {"data": {}}, event_type="invoice.paid")

    event = stripe.Webhook.construct_event(
        delivery.body.decode(),
        delivery.headers["Stripe-Signature"],
        SOURCES["kit-stripe"]["SECRETS"][0],
    )

    assert (event["id"], event["type"]) == (delivery.delivery_id, "invoice.paid")


def test_a_standard_webhooks_delivery_verifies_with_its_library():
    delivery = sign("kit-standard", {"data": {}}, event_type="order.paid")

    webhook = standardwebhooks.Webhook(SOURCES["kit-standard"]["SECRETS"][0])
    event = webhook.verify(delivery.body.decode(), delivery.headers)

    assert event["type"] == "order.paid"
    assert delivery.headers["webhook-id"] == delivery.delivery_id


def test_the_event_fields_are_set_where_each_verifier_reads_them():
    stripe_body = json.loads(sign("kit-stripe", {}, event_type="a.b").body)
    standard_body = json.loads(sign("kit-standard", {}, event_type="a.b").body)
    github = sign("kit-github", {"x": 1}, event_type="push")

    assert {"id", "type", "created"} <= set(stripe_body)
    assert {"type", "timestamp"} <= set(standard_body)
    assert json.loads(github.body) == {"x": 1}
    assert github.headers["X-GitHub-Event"] == "push"
    assert github.headers["X-Hub-Signature-256"].startswith("sha256=")


def test_a_verifier_of_ones_own_cannot_be_signed_for():
    with pytest.raises(CannotSign, match="give the suite a sign\\(\\) method"):
        verifier_kind("custom")
    with pytest.raises(CannotSign, match="no source 'nowhere'"):
        verifier_kind("nowhere")
