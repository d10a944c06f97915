"""A handler registered for a source WEBHOOKS["SOURCES"] does not configure
(a typo, a source renamed in settings) never runs: the deliveries it was
meant for must not be skipped as events nobody handles."""

import pytest
from django.test import Client

from tests.webhooks import signing
from webhooks import processing
from webhooks.checks import check_stray_handlers
from webhooks.handlers import on
from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def stray():
    """A push handler for "githb": the project's source is "github"."""

    @on("githb", "push")
    def build(event):
        raise AssertionError("a handler of no source never runs")

    return build


def deliver(event="push"):
    body = signing.event_body()
    headers = signing.github_headers(body, event=event)
    response = Client().post(
        "/webhooks/github/", body, content_type="application/json", headers=headers
    )
    assert response.status_code == 202
    return WebhookReceipt.objects.get()


def test_its_event_type_is_not_skipped_but_failed_saying_why(stray):
    receipt = deliver()

    with pytest.raises(processing.HandlerFailed):
        processing.process(receipt.pk)

    receipt.refresh_from_db()
    assert receipt.state == "failed"  # kept: a replay runs it once fixed
    assert "'githb'" in receipt.last_error
    assert "does not configure" in receipt.last_error


def test_another_event_type_nobody_handles_is_still_skipped(stray):
    receipt = deliver(event="ping")
    assert processing.process(receipt.pk) == "skipped"


def test_the_check_names_the_handler_and_its_source(stray):
    [error] = check_stray_handlers()
    assert error.id == "webhooks.W004"
    assert "@on('githb', 'push')" in error.msg
    assert "build" in error.msg


def test_the_check_passes_with_every_handler_on_a_configured_source():
    assert check_stray_handlers() == []
