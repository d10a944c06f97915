"""``@idempotent`` on ``async def`` views: one transaction, on the sync thread."""

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from tests.conftest import run_concurrently
from tests.testapp import views
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)


def session_of(user):
    client = AsyncClient()
    client.force_login(user)
    return client


def send(client, name="a", key="k"):
    return async_to_sync(client.post)(
        "/t/async/",
        {"name": name},
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def test_the_first_request_runs_once_and_the_retry_replays(user):
    client = session_of(user)
    first = send(client)
    retry = send(client)

    assert first.status_code == 201
    assert retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert Widget.objects.count() == 1
    assert IdempotencyRecord.objects.get().state == "completed"


def test_an_async_method_of_a_django_class_based_view_is_guarded(user):
    client = session_of(user)

    def send_to_class():
        return async_to_sync(client.post)(
            "/t/async-class/",
            {"name": "a"},
            content_type="application/json",
            headers={"Idempotency-Key": "k"},
        )

    first, retry = send_to_class(), send_to_class()

    assert first.status_code == retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("key", [None, "k"])
def test_a_safe_method_passes_through_unguarded(user, key):
    client = session_of(user)
    send(client)
    headers = {} if key is None else {"Idempotency-Key": key}

    read = async_to_sync(client.get)("/t/async/", headers=headers)

    assert read.status_code == 200
    assert read.json() == {"count": 1}
    assert IdempotencyRecord.objects.count() == 1  # the POST's


def test_the_views_writes_share_the_claims_transaction(user):
    """The view's ORM calls run on the claim's thread, in its transaction:
    its failure rolls its write back and records the failed attempt."""
    client = session_of(user)
    views.faults["raise"] = 1
    with pytest.raises(RuntimeError, match="injected failure"):
        send(client)

    assert Widget.objects.count() == 0
    assert IdempotencyRecord.objects.get().state == "failed"
    assert send(client).status_code == 201
    assert Widget.objects.count() == 1


def test_a_different_payload_is_refused(user):
    client = session_of(user)
    send(client, name="a")

    assert send(client, name="b").status_code == 422
    assert Widget.objects.count() == 1


@pytest.mark.postgresql
def test_a_concurrent_duplicate_waits_for_the_first_and_replays(
    user, monkeypatch, settings
):
    settings.IDEMPOTENCY = {"WAIT": 5}
    entered, release = threading.Event(), threading.Event()

    async def pause():
        entered.set()
        await asyncio.to_thread(release.wait, 10)

    monkeypatch.setattr(views, "async_view_pause", pause)

    def run(i):
        client = session_of(user)
        if i == 0:
            return send(client)
        entered.wait(10)
        # The duplicate blocks on the first one's uncommitted claim meanwhile.
        threading.Timer(0.3, release.set).start()
        return send(client)

    first, duplicate = run_concurrently(2, run)

    assert first.status_code == 201
    assert duplicate.status_code == 201
    assert duplicate["Idempotent-Replayed"] == "true"
    assert duplicate.content == first.content
    assert Widget.objects.count() == 1


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/t/async-handler/", "AsyncHandlerView.post"),
        ("/t/async-create/", "AsyncCreateViewSet.create"),
    ],
)
def test_the_mixin_refuses_an_async_handler_naming_the_class(api, path, name):
    with pytest.raises(IdempotencyConfigurationError, match=name):
        api.post(path, {}, key="k")
