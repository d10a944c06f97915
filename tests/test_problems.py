"""One problem type: every app's errors share ``OnceError``, live in the app's
``exceptions`` module, and become RFC 9457 answers through ``from_exception``."""

import importlib
import inspect
import json
import pkgutil

import pytest
from django.core.exceptions import ImproperlyConfigured

import idempotency
import inbox
import outbox
import webhooks
from idempotency.exceptions import (
    AnonymousKeysExhausted,
    IdempotencyError,
    RequestInFlight,
)
from idempotency.shared.exceptions import OnceError
from idempotency.shared.problems import from_exception
from inbox.exceptions import InboxError, MessageIdInvalid, MessageIdMissing
from outbox.exceptions import EventInvalid, OutboxConfigurationError, OutboxError
from webhooks.exceptions import (
    MALFORMED_BODY,
    REASONS,
    REPLAYED_BODY,
    HandlerFailed,
    ReceiptUnreadable,
    UnknownSource,
    VerificationFailed,
    WebhookError,
)


@pytest.mark.parametrize(
    "base", [IdempotencyError, WebhookError, OutboxError, InboxError]
)
def test_every_apps_errors_share_the_one_problem_base(base):
    assert issubclass(base, OnceError)


def test_the_errors_keep_the_bases_callers_catch_them_by():
    assert issubclass(MessageIdMissing, ValueError)
    assert issubclass(MessageIdInvalid, ValueError)
    assert issubclass(EventInvalid, ValueError)
    assert issubclass(OutboxConfigurationError, ImproperlyConfigured)
    # processing.drain catches them apart: neither may catch the other.
    assert not issubclass(ReceiptUnreadable, HandlerFailed)
    assert not issubclass(HandlerFailed, ReceiptUnreadable)


def _modules():
    for package in (idempotency, outbox, inbox, webhooks):
        for found in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            # Migrations define no errors; the proof kits' assertion errors
            # belong to the test code that uses them, not to an app's answers.
            if ".migrations" in found.name or ".testing" in found.name:
                continue
            yield importlib.import_module(found.name)


def test_every_error_class_lives_in_its_apps_exceptions_module():
    misplaced = [
        f"{module.__name__}.{name}"
        for module in _modules()
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
        and not module.__name__.endswith(".exceptions")
    ]
    assert misplaced == []


class Teapot(OnceError):
    status = 418
    type = "teapot"
    title = "I am a teapot"
    retry_after = 5


def test_from_exception_renders_the_class_attributes_as_problem_json():
    response = from_exception(Teapot("Short and stout."), instance="/pot/")

    assert response.status_code == 418
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"] == "5"
    assert json.loads(response.content) == {
        "type": "/problems/teapot",
        "title": "I am a teapot",
        "status": 418,
        "detail": "Short and stout.",
        "instance": "/pot/",
    }


@pytest.mark.parametrize(
    "refusal",
    [RequestInFlight(retry_after=2), AnonymousKeysExhausted(), UnknownSource()],
    ids=lambda refusal: refusal.type,
)
def test_the_answers_raised_without_a_detail_still_carry_one(refusal):
    # The problem types page promises title, status and detail; these three
    # are raised without a detail of their own and answered with none.
    body = json.loads(from_exception(refusal).content)

    assert body["detail"] and body["detail"] != body["title"]


def test_a_detail_that_says_nothing_more_than_the_title_is_left_out():
    response = from_exception(Teapot(retry_after=0.2))

    assert "detail" not in json.loads(response.content)
    # Whole seconds, and never "now".
    assert response["Retry-After"] == "1"


@pytest.mark.parametrize("reason", sorted(set(REASONS) - {REPLAYED_BODY}))
def test_a_verification_failure_knows_its_answer(reason):
    refusal = VerificationFailed(reason)

    assert refusal.type == f"webhook-{reason}"
    assert refusal.title == "Webhook refused."
    # A signed but unreadable body is the sender's bug, not a forgery.
    assert refusal.status == (400 if reason == MALFORMED_BODY else 401)
