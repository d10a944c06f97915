"""The webhooks' signals and logs: every intake decision and each run."""

import logging

import pytest
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client

from tests.signals import listening, receiver_errors
from tests.testapp.models import Widget
from tests.webhooks import signing
from webhooks import processing
from webhooks.bodies import FORM
from webhooks.exceptions import HandlerFailed
from webhooks.handlers import on
from webhooks.models import WebhookReceipt
from webhooks.querysets import WebhookReceiptQuerySet

pytestmark = pytest.mark.django_db(transaction=True)

DELIVERY = {"source": "github", "delivery_id": "evt_1", "event_type": "push"}


@pytest.fixture
def handler():
    """A github "push" handler; it raises while ``failing`` is set."""
    failing = []

    @on("github", "push")
    def create(event):
        Widget.objects.create(name=event.delivery_id)
        if failing:
            raise RuntimeError("handler broke")

    return failing


def deliver(delivery_id="evt_1", path="/webhooks/github/", **headers):
    body = signing.event_body(delivery_id)
    headers = {**signing.github_headers(body, delivery_id=delivery_id), **headers}
    return Client().post(path, body, content_type="application/json", headers=headers)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_accepted_then_processed_then_a_resend_is_a_duplicate(handler, asynchronous):
    with listening(asynchronous=asynchronous) as heard:
        assert deliver().status_code == 202
        assert deliver().status_code == 200

    receipt = WebhookReceipt.objects.get()
    assert heard == [
        ("delivery_accepted", {**DELIVERY, "reopened": False}),
        (
            "delivery_processed",
            {**DELIVERY, "receipt_id": receipt.pk, "state": "processed"},
        ),
        (
            "delivery_duplicate",
            {**DELIVERY, "original": "evt_1", "state": "processed"},
        ),
    ]


def test_a_refusal_is_sent_at_once_with_its_reason_and_status():
    with listening() as heard:
        deliver(**{"X-Hub-Signature-256": "sha256=" + "0" * 64})
        deliver(path="/webhooks/nobody/")

    assert [
        (k["source"], k["reason"], k["status"]) for k in heard.of("delivery_rejected")
    ] == [("github", "bad-signature", 401), ("", "unknown-source", 404)]
    assert heard.names() == ["delivery_rejected", "delivery_rejected"]


def test_a_refusal_after_verification_names_the_delivery(monkeypatch):
    # Its receipt was purged between the insert's conflict and the read of
    # it, on every attempt: the verified delivery is refused (503), and its
    # signal names it, as every signal of a verified delivery does.
    assert deliver().status_code == 202
    monkeypatch.setattr(WebhookReceiptQuerySet, "duplicate_of", lambda *a: None)

    with listening() as heard:
        assert deliver().status_code == 503

    (refused,) = heard.of("delivery_rejected")
    assert {k: refused[k] for k in DELIVERY} == DELIVERY


def test_a_failing_handler_is_failed_and_never_processed(handler, webhook_sources):
    # Eager Celery would run every retry at once.
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 0}
    handler.append(True)
    with listening() as heard:
        deliver()

    receipt = WebhookReceipt.objects.get()
    assert receipt.state == "failed"
    assert heard.names() == ["delivery_accepted", "delivery_failed"]
    [failed] = heard.of("delivery_failed")
    assert {k: failed[k] for k in DELIVERY} == DELIVERY
    assert (failed["receipt_id"], failed["attempts"]) == (receipt.pk, 1)
    assert isinstance(failed["error"], RuntimeError)


def test_a_failure_a_redelivery_reopened_meanwhile_is_not_reported(
    handler, webhook_sources, monkeypatch, caplog
):
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 0}
    handler.append(True)
    deliver()
    receipt = WebhookReceipt.objects.get()
    assert receipt.state == "failed"
    record_failure = WebhookReceiptQuerySet.record_failure

    def reopened_first(self, pk, error, **kwargs):
        # The provider's redelivery takes the row lock once the retry's
        # transaction rolls back, before its failure mark.
        assert WebhookReceipt.objects.reopen_failed(pk)
        return record_failure(self, pk, error, **kwargs)

    monkeypatch.setattr(WebhookReceiptQuerySet, "record_failure", reopened_first)
    caplog.set_level(logging.DEBUG, logger="webhooks")
    caplog.clear()
    with listening() as heard, pytest.raises(HandlerFailed):
        processing.process(receipt.pk)

    # Received, for the redelivery's drain: nothing failed, nothing to count.
    assert WebhookReceipt.objects.get().state == "received"
    assert heard == []
    assert [r for r in caplog.records if r.name == "webhooks"] == []


@pytest.fixture
def operator(client, make_user):
    user = make_user("operator", is_staff=True)
    for codename in ("view", "replay", "reprocess"):
        user.user_permissions.add(
            Permission.objects.get(codename=f"{codename}_webhookreceipt")
        )
    client.force_login(user)
    return user


def test_an_operators_replay_is_sent_with_the_operator(handler, client, operator):
    handler.append(True)
    deliver()
    failed = WebhookReceipt.objects.get()
    handler.clear()

    with listening() as heard:
        client.post(
            "/admin/webhooks/webhookreceipt/",
            {"action": "replay", "_selected_action": [failed.pk]},
        )

    [replayed] = heard.of("delivery_replayed")
    assert replayed == {
        "count": 1,
        "user": operator,
        "forced": False,
        "receipt_ids": [failed.pk],
    }


@pytest.mark.parametrize(
    "action",
    [
        {"action": "replay"},  # a processed receipt is not replayed
        # A stale confirmation page: the receipt has moved on since.
        {"action": "force_reprocess", "post": "yes", "versions": "{pk}:7"},
    ],
    ids=["replay", "force-reprocess"],
)
def test_a_replay_that_reopens_nothing_reports_no_replay(
    handler, client, operator, caplog, action
):
    deliver()
    done = WebhookReceipt.objects.get()
    assert done.state == "processed"
    caplog.set_level(logging.DEBUG, logger="webhooks")
    caplog.clear()

    with listening() as heard:
        client.post(
            "/admin/webhooks/webhookreceipt/",
            {
                **{k: v.format(pk=done.pk) for k, v in action.items()},
                "_selected_action": [done.pk],
            },
        )

    assert heard == []
    assert [r for r in caplog.records if r.name == "webhooks"] == []


def test_a_raising_receiver_never_breaks_the_intake_or_processing(handler, caplog):
    with listening(raising=True) as heard:
        assert deliver().status_code == 202

    assert WebhookReceipt.objects.get().state == "processed"
    assert Widget.objects.count() == 1
    assert heard.names() == ["delivery_accepted", "delivery_processed"]
    assert len(receiver_errors(caplog)) == 2


def test_each_decision_is_logged_once_with_its_ids_and_never_the_body(handler, caplog):
    caplog.set_level(logging.DEBUG, logger="webhooks")
    deliver(**{"X-Hub-Signature-256": "sha256=" + "0" * 64})
    deliver()
    deliver()

    logged = [r for r in caplog.records if r.name == "webhooks"]
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("WARNING", "Refused a delivery to 'github' (bad-signature): bad signature"),
        ("DEBUG", "Accepted evt_1 from github"),
        ("DEBUG", f"Receipt {WebhookReceipt.objects.get().pk} processed"),
        ("INFO", "Duplicate evt_1 from github"),
    ]
    assert (logged[0].source, logged[0].reason, logged[0].status) == (
        "github",
        "bad-signature",
        401,
    )
    assert all({k: getattr(r, k) for k in DELIVERY} == DELIVERY for r in logged[1:])
    body = signing.event_body("evt_1").decode()
    assert all(body not in f"{r.getMessage()} {vars(r)}" for r in caplog.records)


SECRET_TEXT = "SECRETBODYCONTENT"


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        # parse_qsl quotes the field it refuses.
        (b"payload=%7B%7D&" + SECRET_TEXT.encode(), FORM, "body: form body malformed"),
        (b"\xff" + SECRET_TEXT.encode(), "application/json", "body: not UTF-8"),
        (SECRET_TEXT.encode(), "application/json", "body: not JSON"),
        (f'["{SECRET_TEXT}"]'.encode(), "application/json", "body: not a JSON object"),
    ],
    ids=["form", "utf-8", "json", "not-an-object"],
)
def test_a_malformed_body_is_refused_in_fixed_words_never_its_text(
    body, content_type, detail, caplog
):
    caplog.set_level(logging.DEBUG)
    headers = signing.github_headers(body, delivery_id="evt_1")
    with listening() as heard:
        answer = Client().post(
            "/webhooks/github/", body, content_type=content_type, headers=headers
        )

    assert answer.status_code == 400
    assert answer.json()["detail"] == detail
    [rejected] = heard.of("delivery_rejected")
    assert rejected["detail"] == detail
    assert SECRET_TEXT not in answer.content.decode() + repr(heard)
    assert all(SECRET_TEXT not in f"{r.getMessage()} {vars(r)}" for r in caplog.records)


class BrokerDown(Exception):
    pass


def test_a_handlers_hook_raising_after_the_commit_still_reports_it_processed():
    # A handler's task.delay() in on_commit while the broker is down: its
    # work and the "processed" mark committed, and Django drops every hook
    # queued after the raising one.
    def enqueue_with_the_broker_down():
        raise BrokerDown("the broker is down")

    @on("github", "push")
    def create(event):
        Widget.objects.create(name=event.delivery_id)
        transaction.on_commit(enqueue_with_the_broker_down)

    with listening() as heard:
        deliver()

    receipt = WebhookReceipt.objects.get()
    assert receipt.state == "processed"
    assert heard.names() == ["delivery_accepted", "delivery_processed"]
