"""Sources: built once per settings change, refused when RETENTION or a secret
would let a delivery run twice; the purge refuses with them."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from idempotency.shared import retention
from tests.webhooks import signing
from webhooks import sources
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def builds(monkeypatch):
    """The names of the sources built (validated, verifier made), in order."""
    built = []
    validate = sources.validate

    def counting(name, config):
        built.append(name)
        return validate(name, config)

    monkeypatch.setattr(sources, "validate", counting)
    return built


def deliver(delivery_id):
    body = signing.event_body(delivery_id)
    return Client().post(
        "/webhooks/stripe/",
        body,
        content_type="application/json",
        headers=signing.stripe_headers(body),
    )


def test_a_source_is_built_once_per_settings_change(builds, webhook_sources):
    for n in range(3):
        assert deliver(f"evt_{n}").status_code == 202
    assert builds == ["stripe"]

    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 1}
    for n in range(3, 6):
        assert deliver(f"evt_{n}").status_code == 202
    assert builds == ["stripe", "stripe"]


def test_the_view_uses_the_built_source(builds):
    deliver("evt_1")
    assert sources.get("stripe") is sources.get("stripe")
    assert builds == ["stripe"]


def github_delivery(delivery_id="gh_1"):
    body = signing.event_body(delivery_id)
    return Client().post(
        "/webhooks/github/",
        body,
        content_type="application/json",
        headers=signing.github_headers(body, delivery_id=delivery_id),
    )


def refused(response, caplog, check_id):
    """The delivery was refused as the server's misconfiguration, and logged."""
    assert response.status_code == 500
    assert response.json()["type"].endswith("/webhook-misconfigured")
    assert not WebhookReceipt.objects.exists()
    [log] = [r for r in caplog.records if r.name == "webhooks"]
    assert log.levelname == "ERROR"
    assert check_id in log.getMessage()
    return True


def test_a_tolerance_the_retention_cannot_outlast_refuses_its_deliveries(
    webhook_sources, caplog
):
    # Signed at t, a delivery verifies until t + TOLERANCE; processed as
    # early as t - TOLERANCE, its receipt must outlive both ends.
    stripe = webhook_sources.WEBHOOKS["SOURCES"]["stripe"]
    stripe["TOLERANCE"] = timedelta(days=4).total_seconds()
    webhook_sources.WEBHOOKS["RETENTION"] = timedelta(days=7)

    assert refused(deliver("evt_1"), caplog, "webhooks.E019")
    webhook_sources.WEBHOOKS["SOURCES"]["github"]["REPLAY_HORIZON"] = timedelta(days=7)
    assert github_delivery().status_code == 202  # the other sources keep working


def test_a_retention_under_the_providers_retries_refuses_its_deliveries(
    webhook_sources, caplog
):
    webhook_sources.WEBHOOKS["RETENTION"] = timedelta(days=2)
    assert refused(deliver("evt_1"), caplog, "webhooks.E018")


def test_a_source_without_a_signed_time_refuses_a_shorter_retention_unless_stated(
    webhook_sources, caplog
):
    webhook_sources.WEBHOOKS["RETENTION"] = timedelta(days=7)
    assert refused(github_delivery(), caplog, "webhooks.E020")
    assert deliver("evt_1").status_code == 202

    webhook_sources.WEBHOOKS["SOURCES"]["github"]["REPLAY_HORIZON"] = timedelta(days=7)
    assert github_delivery().status_code == 202
    assert sources.get("github").replay_horizon == timedelta(days=7)
    assert sources.get("stripe").replay_horizon is None


def test_a_short_secret_refuses_deliveries_unless_the_source_lowers_the_minimum(
    webhook_sources, caplog
):
    github = webhook_sources.WEBHOOKS["SOURCES"]["github"]
    github["SECRETS"] = [signing.GITHUB_SECRET[:12]]
    body = signing.event_body("gh_1")
    headers = signing.github_headers(
        body, secret=github["SECRETS"][0], delivery_id="gh_1"
    )

    answer = Client().post(
        "/webhooks/github/", body, "application/json", headers=headers
    )
    assert refused(answer, caplog, "webhooks.E017")

    github["MIN_SECRET_BYTES"] = 12
    answer = Client().post(
        "/webhooks/github/", body, "application/json", headers=headers
    )
    assert answer.status_code == 202


@pytest.mark.parametrize(
    "change",
    [
        {"RETENTION": timedelta(days=2)},  # under the providers' retries
        {"RETENTION": timedelta(days=7)},  # under github's REPLAY_HORIZON
    ],
)
def test_the_purge_refuses_a_retention_a_source_refuses(webhook_sources, change):
    old = timezone.now() - timedelta(days=40)
    WebhookReceipt.objects.create(
        source="stripe",
        delivery_id="evt_old",
        state="processed",
        body=b"{}",
        received_at=old,
        processed_at=old,
    )
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, **change}

    with pytest.raises(ImproperlyConfigured, match="RETENTION"):
        retention.purge(only=["webhooks"])
    assert WebhookReceipt.objects.exists()


def test_the_purge_refuses_while_a_source_is_misconfigured(webhook_sources):
    # It cannot tell how long that source's receipts are needed.
    webhook_sources.WEBHOOKS["SOURCES"]["stripe"]["SECRETS"] = ["whsec_short"]
    with pytest.raises(ImproperlyConfigured, match=r"webhooks\.E017"):
        retention.purge(only=["webhooks"])


def test_the_purge_runs_with_a_retention_every_source_accepts(webhook_sources):
    webhook_sources.WEBHOOKS["RETENTION"] = timedelta(days=7)
    for name in ("github", "hmac", "small"):
        webhook_sources.WEBHOOKS["SOURCES"][name]["REPLAY_HORIZON"] = timedelta(days=7)
    assert retention.purge(only=["webhooks"], dry_run=True) == {"webhooks": 0}


def test_a_secret_pasted_with_its_newline_refuses_deliveries_by_name(
    webhook_sources, caplog
):
    # Not 401 bad-signature on every delivery (lost events, blamed on the
    # provider): the source is refused, the log says which secret and why.
    stripe = webhook_sources.WEBHOOKS["SOURCES"]["stripe"]
    stripe["SECRETS"] = [signing.STRIPE_SECRET + "\n"]
    assert refused(deliver("evt_1"), caplog, "webhooks.E006")
    assert "whitespace around it" in caplog.text
