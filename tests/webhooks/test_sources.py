"""Sources are built once per settings change, not once per request."""

import pytest
from django.test import Client

from tests.webhooks import signing
from webhooks import sources

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
