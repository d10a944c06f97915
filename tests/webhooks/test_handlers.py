import importlib
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from tests.testapp.models import Widget
from tests.webhooks import signing
from webhooks import processing
from webhooks.handlers import Event, handlers_for, is_stale, on
from webhooks.models import WebhookReceipt

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_an_older_event_is_stale():
    assert is_stale(T, T - timedelta(seconds=1))
    assert not is_stale(T, T + timedelta(seconds=1))


def test_a_tie_or_an_unknown_time_is_not_stale():
    assert not is_stale(T, T)
    assert not is_stale(None, T)
    assert not is_stale(T, None)


def test_the_event_helper_compares_its_own_time():
    event = Event(None, "s", "t", "d", occurred_at=T)
    assert event.is_stale(T + timedelta(hours=1))
    assert not event.is_stale(None)


def test_handlers_register_per_source_and_event_type():
    @on("github", "issues")
    def first(event): ...

    @on("github", "issues")
    def second(event): ...

    on("github", "issues")(first)  # registering twice keeps one

    assert handlers_for("github", "issues") == [first, second]
    assert handlers_for("stripe", "issues") == []


@pytest.mark.parametrize("event_type", ["*", "customer.*", "invoice.*.paid"])
def test_a_wildcard_event_type_is_refused_not_left_to_never_run(event_type):
    # dj-stripe users write handlers for "customer.*": registered as is, the
    # handler would never run, and every event it meant would be skipped.
    def handler(event): ...

    with pytest.raises(ImproperlyConfigured, match="wildcard"):
        on("stripe", event_type)(handler)
    assert handlers_for("stripe", event_type) == []


FAILS_PARTWAY = """
import os

from tests.testapp.models import Widget
from webhooks.handlers import on


@on("github", "push")
def build(event):
    Widget.objects.create(name=event.delivery_id)


if os.environ.pop("FAIL_PARTWAY", None):
    raise RuntimeError("an import below the handlers failed")
"""


@pytest.fixture
def fails_partway(tmp_path, monkeypatch):
    """A handlers module whose first import fails after its handlers."""
    (tmp_path / "fails_partway.py").write_text(FAILS_PARTWAY)
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.setenv("FAIL_PARTWAY", "1")
    yield "fails_partway"
    sys.modules.pop("fails_partway", None)


@pytest.mark.django_db
def test_a_module_imported_again_after_failing_partway_registers_once(
    fails_partway,
):
    # Python runs a module whose import failed in full again: its handlers
    # were registered a second time, and each delivery ran both.
    with pytest.raises(RuntimeError):
        importlib.import_module(fails_partway)
    module = importlib.import_module(fails_partway)

    assert handlers_for("github", "push") == [module.build]
    body = signing.event_body("evt_1")
    Client().post(
        "/webhooks/github/",
        body,
        content_type="application/json",
        headers=signing.github_headers(body, delivery_id="evt_1"),
    )
    assert processing.process(WebhookReceipt.objects.get().pk) == "processed"
    assert Widget.objects.count() == 1


def test_closures_of_one_name_from_one_module_are_distinct_handlers():
    def handler_for(sku):
        @on("stripe", "order.paid")
        def handler(event): ...

        return handler

    first, second = handler_for("a"), handler_for("b")

    assert handlers_for("stripe", "order.paid")[-2:] == [first, second]
