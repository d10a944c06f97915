"""The keys' signals and logs: one per decision, never the raw key."""

import contextlib
import logging
import re
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from idempotency.models import IdempotencyRecord
from idempotency.shared import units
from idempotency.signals import key_replayed
from tests.signals import LOGGERS, listening, receiver_errors
from tests.testapp import views
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)

# A key and a body no log line or signal may repeat.
KEY = "k-7f3a-DISTINCTIVE-KEY"
SECRET = "BODY-MARKER-93c1"


def identity(record, mode="atomic"):
    unit = units.Unit(units.KEYS, (record.scope, record.operation, KEY))
    return {
        "operation": record.operation,
        "mode": mode,
        "scope": record.scope,
        "unit": unit.identity,
    }


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_each_decision_is_one_signal_with_the_requests_identity(api, asynchronous):
    with listening(asynchronous=asynchronous) as heard:
        first = api.post("/t/widgets/", {"name": "a"}, key=KEY)
        replay = api.post("/t/widgets/", {"name": "a"}, key=KEY)
        other = api.post("/t/widgets/", {"name": "b"}, key=KEY)

    assert (first.status_code, replay.status_code, other.status_code) == (
        201,
        201,
        422,
    )
    record = IdempotencyRecord.objects.get()
    assert heard.names() == ["key_claimed", "key_replayed", "key_mismatch"]
    claimed, replayed, mismatch = (kwargs for _name, kwargs in heard)
    assert claimed == {**identity(record), "attempt": 1}
    assert replayed == {**identity(record), "status": 201}
    assert mismatch == {**identity(record), "problem": "key-reused"}


def test_a_steps_mode_view_is_reported_as_lease_mode(api):
    body = {"amount": 500}
    with listening() as heard:
        api.post("/t/payment/", body, key=KEY)
        api.post("/t/payment/", body, key=KEY)
        other = api.post("/t/payment/", {"amount": 600}, key=KEY)

    assert other.status_code == 422
    keys = [(name, kwargs) for name, kwargs in heard if name.startswith("key_")]
    assert [name for name, _kwargs in keys] == [
        "key_claimed",
        "key_replayed",
        "key_mismatch",
    ]
    # It runs on lease mode's claim; its refusals said "steps" before.
    assert {kwargs["mode"] for _name, kwargs in keys} == {"lease"}


def test_a_view_that_raises_is_failed_and_never_claimed(api):
    views.faults["raise"] = 1
    with listening() as heard, pytest.raises(RuntimeError):
        api.post("/t/widgets/", {"name": "a"}, key=KEY)

    # The claim's work rolled back: key_claimed was never sent.
    assert heard.names() == ["key_failed"]
    assert heard.of("key_failed")[0]["reason"] == "raised"
    assert heard.of("key_failed")[0]["status"] == 500


def test_a_commit_that_fails_is_failed_and_never_claimed(api):
    from django.db import IntegrityError

    views.faults["commit"] = 1
    with listening() as heard, pytest.raises(IntegrityError):
        api.post("/t/widgets/", {"name": "a"}, key=KEY)

    assert heard.names() == ["key_failed"]
    assert (
        heard.of("key_failed")[0]["reason"],
        heard.of("key_failed")[0]["status"],
    ) == (
        "raised",
        500,
    )


def test_a_hook_of_the_view_raising_after_the_commit_is_no_failure(api):
    # The work and the answer committed; a retry replays it. Its own
    # on_commit hook raising (a task enqueued while the broker is down) is
    # the view's error, not a failed attempt.
    views.faults["on-commit"] = 1
    with listening() as heard:
        with pytest.raises(views.BrokerDown):
            api.post("/t/widgets/", {"name": "a"}, key=KEY)
        assert heard.names() == ["key_claimed"]
        replay = api.post("/t/widgets/", {"name": "a"}, key=KEY)

    assert replay.status_code == 201
    assert heard.names() == ["key_claimed", "key_replayed"]


@pytest.mark.parametrize("fault", ["none", "on-commit", "raise"])
def test_under_atomic_requests_a_claim_is_sent_once_its_work_commits(
    api, monkeypatch, fault
):
    # The request's transaction commits after the view returns, and runs the
    # hooks there: one of the view's raising must not drop key_claimed.
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    if fault != "none":
        views.faults[fault] = 1
    with listening() as heard:
        with contextlib.suppress(views.BrokerDown, RuntimeError):
            api.post("/t/widgets/", {"name": "a"}, key=KEY)
        first = heard.names()
        again = api.post("/t/widgets/", {"name": "a"}, key=KEY)

    if fault == "raise":  # all rolled back, the failed record too: the retry runs
        assert first == []
        assert again.status_code == 201
        assert heard.names() == ["key_claimed"]
    else:  # committed: claimed once, and the retry replays it
        assert first == ["key_claimed"]
        assert again.status_code == 201
        assert heard.names() == ["key_claimed", "key_replayed"]
        assert Widget.objects.count() == 1


def test_in_lease_mode_a_hook_raising_after_the_commit_is_no_failure(api):
    views.faults["on-commit"] = 1
    with listening() as heard, pytest.raises(views.BrokerDown):
        api.post("/t/charge/", {}, key=KEY)

    assert heard.names() == ["key_claimed"]
    assert api.post("/t/charge/", {}, key=KEY).status_code == 201


def test_a_refused_key_is_one_signal_with_its_problem_and_never_the_key(api):
    with listening() as heard:
        missing = api.post("/t/widgets/", {"name": "a"})
        malformed = api.post("/t/widgets/", {"name": "a"}, key=KEY + " \x7f")

    assert (missing.status_code, malformed.status_code) == (400, 400)
    assert heard.names() == ["key_refused", "key_refused"]
    # Refused before the scope was known: no scope, no unit.
    unknown = {"operation": "widget.create", "mode": "atomic", "scope": "", "unit": ""}
    assert heard.of("key_refused") == [
        {**unknown, "problem": "key-missing"},
        {**unknown, "problem": "key-malformed"},
    ]
    assert KEY not in repr(heard)


def test_an_error_answer_and_a_validation_failure_are_failed_with_their_reason(api):
    views.faults["500"] = 1
    with listening() as heard:
        api.post("/t/widgets/", {"name": "a"}, key=KEY)
        api.post("/t/widgets/", {}, key="another")  # no name: a 400 from DRF

    assert heard.names() == ["key_failed", "key_failed"]
    assert [(f["reason"], f["status"]) for f in heard.of("key_failed")] == [
        ("error-status", 500),
        ("invalid", 400),
    ]


def test_lease_mode_is_claimed_when_the_claim_commits_and_a_duplicate_conflicts(
    api,
):
    views.faults["crash"] = 1
    with listening() as heard:
        with pytest.raises(views.SimulatedCrash):
            api.post("/t/charge/", {}, key=KEY)
        early = api.post("/t/charge/", {}, key=KEY)

    assert early.status_code == 409
    record = IdempotencyRecord.objects.get()
    # The crash (a dead process) recorded nothing: the lease is still held.
    assert heard.names() == ["key_claimed", "key_conflict"]
    assert heard.of("key_claimed")[0] == {**identity(record, "lease"), "attempt": 1}
    assert heard.of("key_conflict")[0]["problem"] == "request-in-flight"


def test_a_raising_receiver_never_breaks_a_keyed_request_and_is_logged(api, caplog):
    with listening(raising=True) as heard:
        first = api.post("/t/widgets/", {"name": "a"}, key=KEY)
        replay = api.post("/t/widgets/", {"name": "a"}, key=KEY)

    assert (first.status_code, replay.status_code) == (201, 201)
    assert replay["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1
    assert IdempotencyRecord.objects.get().state == "completed"
    assert heard.names() == ["key_claimed", "key_replayed"]
    assert len(receiver_errors(caplog)) == 2


def test_an_async_receiver_hears_a_request_to_an_async_view(user):
    client = AsyncClient()
    client.force_login(user)
    post = async_to_sync(client.post)

    with listening(asynchronous=True) as heard:
        for _ in range(2):
            answer = post(
                "/t/async/",
                {"name": "a"},
                content_type="application/json",
                headers={"Idempotency-Key": KEY},
            )
            assert answer.status_code == 201

    assert heard.names() == ["key_claimed", "key_replayed"]


def test_each_decision_is_logged_once_with_its_identity_and_never_the_key_or_body(
    api, caplog
):
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    api.post("/t/widgets/", {"name": SECRET}, key=KEY)
    api.post("/t/widgets/", {"name": SECRET}, key=KEY)
    api.post("/t/widgets/", {"name": "other"}, key=KEY)
    api.post("/t/widgets/", {"name": SECRET})  # no key: refused

    record = IdempotencyRecord.objects.get()
    logged = [r for r in caplog.records if r.name == "idempotency"]
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("DEBUG", f"Key claimed for {record.operation} (attempt 1)"),
        ("INFO", f"Replayed the stored answer (201) for {record.operation}"),
        ("WARNING", f"Refused (key-reused) for {record.operation}"),
        ("INFO", f"Refused (key-missing) for {record.operation}"),
    ]
    for log in logged[:3]:
        assert {name: getattr(log, name) for name in identity(record)} == identity(
            record
        )
    assert (logged[3].scope, logged[3].unit) == ("", "")
    for log in caplog.records:
        text = f"{log.getMessage()} {vars(log)}"
        assert KEY not in text
        assert SECRET not in text


def test_the_documented_audit_receiver_runs(api, caplog):
    page = (Path(__file__).parents[2] / "docs" / "observability.md").read_text()
    [code] = re.findall(r"```python\n(# orders/receivers\.py\n.*?)```", page, re.S)
    module: dict = {}
    exec(compile(code, "docs/observability.md", "exec"), module)
    caplog.set_level(logging.INFO, logger="orders.audit")
    try:
        api.post("/t/widgets/", {"name": "a"}, key=KEY)
        api.post("/t/widgets/", {"name": "a"}, key=KEY)
    finally:
        key_replayed.disconnect(module["audit_replay"])

    record = IdempotencyRecord.objects.get()
    unit = identity(record)["unit"]
    [log] = [r for r in caplog.records if r.name == "orders.audit"]
    assert log.getMessage() == (
        f"answer replayed: {record.operation} for {record.scope} "
        f"(status 201, request {unit[:12]})"
    )
