"""The intake view answers every refusal through ``problems.from_exception``."""

import pytest
from django.test import Client

from idempotency.shared.problems import from_exception
from webhooks.exceptions import SourceOutOfService, UnknownSource

pytestmark = pytest.mark.django_db


def test_the_webhook_view_answers_an_unknown_source_through_from_exception():
    response = Client().post("/webhooks/nope/", b"{}", content_type="text/plain")

    assert response.content == from_exception(UnknownSource()).content
    assert response.status_code == 404


def test_the_webhook_view_answers_a_misconfigured_source_through_from_exception(
    webhook_sources,
):
    webhook_sources.WEBHOOKS = {
        "SOURCES": {"github": {"VERIFIER": "github", "SECRETS": []}}
    }
    response = Client().post("/webhooks/github/", b"{}", content_type="text/plain")

    expected = from_exception(
        SourceOutOfService(
            "This source's settings are invalid; the server's error log says why."
        )
    )
    assert (response.status_code, response.content) == (500, expected.content)
