"""A configured source with no handler at all (its handlers in a module
nothing imports) skips every delivery: the check and the worker's log say so."""

import logging

import pytest
from django.test import Client

from tests.webhooks import signing
from webhooks import processing
from webhooks.checks import check_unhandled_sources
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def github_only(webhook_sources, handler_registry, monkeypatch):
    """Only "github" is configured, and no handler is registered for it (the
    demo's, installed with the suite, are left out; the registry fixture puts
    them back)."""
    github = webhook_sources.WEBHOOKS["SOURCES"]["github"]
    webhook_sources.WEBHOOKS = {"SOURCES": {"github": github}}
    for key in [key for key in handler_registry._registry if key[0] == "github"]:
        del handler_registry._registry[key]
    # Another test's delivery may have reported it in this process already.
    monkeypatch.setattr(processing, "_unhandled_reported", set())


def deliver(delivery_id):
    body = signing.event_body(delivery_id)
    headers = signing.github_headers(body, delivery_id=delivery_id)
    response = Client().post(
        "/webhooks/github/", body, content_type="application/json", headers=headers
    )
    assert response.status_code == 202
    return WebhookReceipt.objects.get(delivery_id=delivery_id)


@pytest.mark.usefixtures("github_only")
def test_the_check_names_the_source_and_where_handlers_are_looked_for():
    [warning] = check_unhandled_sources()
    assert warning.id == "webhooks.W005"
    assert "'github'" in warning.msg
    assert "webhooks.py" in warning.hint


@pytest.mark.usefixtures("github_only")
def test_a_handler_for_any_of_its_event_types_passes_the_check():
    @on("github", "ping")
    def pong(event):
        pass

    assert check_unhandled_sources() == []


@pytest.mark.usefixtures("github_only")
def test_the_first_skipped_delivery_in_a_worker_logs_a_warning_once(caplog):
    caplog.set_level(logging.WARNING, logger="webhooks")
    for delivery_id in ("evt_1", "evt_2"):
        assert processing.process(deliver(delivery_id).pk) == "skipped"

    [warned] = [r for r in caplog.records if r.name == "webhooks"]
    assert warned.levelname == "WARNING"
    assert warned.source == "github"
    assert "'github'" in warned.getMessage()
    assert "webhooks.py" in warned.getMessage()


@pytest.mark.usefixtures("github_only")
def test_a_source_with_a_handler_logs_nothing_for_an_event_nobody_handles(caplog):
    @on("github", "ping")
    def pong(event):
        pass

    caplog.set_level(logging.WARNING, logger="webhooks")
    assert processing.process(deliver("evt_1").pk) == "skipped"
    assert [r for r in caplog.records if r.name == "webhooks"] == []
