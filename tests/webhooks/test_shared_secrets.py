"""Two sources sharing a secret: a delivery signed for one verifies at the
other's URL too, and runs the other's handlers there. The check warns."""

import pytest
from django.test import Client

from tests.webhooks import signing
from webhooks.checks import check_shared_secrets
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_github_sources(webhook_sources):
    github = webhook_sources.WEBHOOKS["SOURCES"]["github"]
    webhook_sources.WEBHOOKS = {
        "SOURCES": {"github": github, "github-billing": dict(github)}
    }


@pytest.mark.usefixtures("two_github_sources")
def test_a_delivery_signed_for_one_source_verifies_at_the_other():
    # Why the check exists: the provider signed it for "github" alone.
    body = signing.event_body("d-1")
    response = Client().post(
        "/webhooks/github-billing/",
        body,
        content_type="application/json",
        headers=signing.github_headers(body, delivery_id="d-1"),
    )

    assert response.status_code == 202
    assert WebhookReceipt.objects.get().source == "github-billing"


@pytest.mark.usefixtures("two_github_sources")
def test_the_check_names_the_sources_sharing_a_secret():
    [warning] = check_shared_secrets()

    assert warning.id == "webhooks.W006"
    assert "'github', 'github-billing'" in warning.msg
    assert "own secret" in warning.hint


@pytest.fixture
def own_secrets(webhook_sources):
    """Three sources, each with its own secret."""
    sources = webhook_sources.WEBHOOKS["SOURCES"]
    webhook_sources.WEBHOOKS = {
        "SOURCES": {name: sources[name] for name in ("github", "stripe", "standard")}
    }
    return webhook_sources


def test_a_secret_rotated_within_one_source_passes(own_secrets):
    webhook_sources = own_secrets
    sources = webhook_sources.WEBHOOKS["SOURCES"]
    secret = sources["github"]["SECRETS"][0]
    sources["github"]["SECRETS"] = [secret + "-new", secret]

    assert check_shared_secrets() == []


@pytest.mark.usefixtures("own_secrets")
def test_sources_with_their_own_secrets_pass():
    assert check_shared_secrets() == []


def test_invalid_secrets_are_left_to_the_settings_check(own_secrets):
    own_secrets.WEBHOOKS["SOURCES"]["github"]["SECRETS"] = "a-string"

    assert check_shared_secrets() == []
