"""Lease mode: work that calls the outside world survives a crash safely."""

import threading

import pytest

from idempotency.models import IdempotencyRecord
from tests.conftest import ApiClient, run_concurrently
from tests.testapp import views
from tests.testapp.downstream import provider
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_claim_commits_before_the_view_runs(api, monkeypatch):
    seen = {}
    original = views.ChargeView.post

    def spy(self, request):
        # Read through a fresh connection: only committed rows are visible.
        seen["state"] = run_concurrently(
            1, lambda i: IdempotencyRecord.objects.get().state
        )[0]
        return original(self, request)

    monkeypatch.setattr(views.ChargeView, "post", spy)
    api.post("/t/charge/", {}, key="k")

    assert seen["state"] == "pending"
    assert IdempotencyRecord.objects.get().state == "completed"


def test_crash_after_the_downstream_call_is_retried_with_the_same_derived_key(
    api, clock
):
    views.faults["crash"] = 1
    with pytest.raises(views.SimulatedCrash):
        api.post("/t/charge/", {}, key="k")

    # The process died: the downstream charge happened, nothing local did.
    assert len(provider.charges) == 1
    assert Widget.objects.count() == 0
    record = IdempotencyRecord.objects.get()
    assert record.state == "pending"

    # While the lease holds, a retry is told to come back later.
    early = api.post("/t/charge/", {}, key="k")
    assert early.status_code == 409
    assert int(early["Retry-After"]) >= 1

    clock.advance(seconds=31)
    retry = api.post("/t/charge/", {}, key="k")

    assert retry.status_code == 201
    assert provider.calls == 2
    assert len(provider.charges) == 1  # the provider deduped on the derived key
    assert Widget.objects.count() == 1
    record.refresh_from_db()
    assert (record.state, record.attempts) == ("completed", 2)
    assert api.post("/t/charge/", {}, key="k")["Idempotent-Replayed"] == "true"


def test_derived_keys_are_stable_per_step_and_differ_between_steps_and_keys():
    from idempotency.claims import Claim

    def claim(key):
        return Claim(
            key=key, scope="user:1", operation="op", request_hash="h", expires_at=None
        )

    assert claim("k").derive("charge") == claim("k").derive("charge")
    assert claim("k").derive("charge") != claim("k").derive("refund")
    assert claim("k").derive("charge") != claim("k2").derive("charge")


def test_a_worker_whose_lease_lapsed_cannot_overwrite_the_newer_attempt(
    user, clock, monkeypatch
):
    """Fencing: the slow first attempt finishes after a retry took over."""
    slow_started, retry_done = threading.Event(), threading.Event()
    original = views.ChargeView.post

    def post(self, request):
        if not slow_started.is_set():
            slow_started.set()
            retry_done.wait(10)  # the lease lapses while this one hangs
        return original(self, request)

    monkeypatch.setattr(views.ChargeView, "post", post)

    def run(i):
        client = ApiClient(user.username)
        if i == 0:
            return client.post("/t/charge/", {}, key="k")
        slow_started.wait(10)
        clock.advance(seconds=31)
        try:
            return client.post("/t/charge/", {}, key="k")
        finally:
            retry_done.set()

    slow, retry = run_concurrently(2, run)

    assert retry.status_code == 201
    assert slow.status_code == 409
    assert slow.json()["type"].endswith("/lease-lost")
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("completed", 2)
    assert bytes(record.response_body) == retry.content
    # The slow attempt's local write rolled back with its lost completion.
    assert Widget.objects.count() == 1
    assert len(provider.charges) == 1


def test_lease_mode_failure_marks_failed_and_the_retry_runs(api):
    views.faults["500"] = 1
    assert api.post("/t/charge/", {}, key="k").status_code == 500
    assert IdempotencyRecord.objects.get().state == "failed"
    assert Widget.objects.count() == 0

    assert api.post("/t/charge/", {}, key="k").status_code == 201
    assert len(provider.charges) == 1


def test_a_stale_attempt_failing_validation_cannot_withdraw_the_newer_claim(
    user, clock, monkeypatch
):
    """Withdrawing a claim is fenced on the attempt too."""
    from rest_framework.exceptions import ValidationError

    def refuse(*args):
        raise ValidationError({"amount": ["No longer valid."]})

    slow, retry, left_behind = _race_a_stale_attempt_against_a_running_retry(
        user, clock, monkeypatch, stale=refuse
    )

    assert slow.status_code == 400
    assert left_behind == ("pending", 2)
    assert retry.status_code == 201
    assert IdempotencyRecord.objects.get().state == "completed"


def test_lease_mode_request_failing_validation_leaves_no_record(api):
    invalid = api.post("/t/charge/", {"amount": 0}, key="k")
    assert invalid.status_code == 400
    assert IdempotencyRecord.objects.count() == 0
    assert provider.calls == 0

    corrected = api.post("/t/charge/", {"amount": 700}, key="k")
    assert corrected.status_code == 201
    assert IdempotencyRecord.objects.get().state == "completed"
    assert list(provider.charges.values()) == [(corrected.json()["charge"], 700)]


def test_lease_mode_validation_failure_of_a_retry_keeps_the_failed_record(
    api, monkeypatch
):
    """Earlier attempts of the key ran (and may have called out with its
    derived keys): their failed record stays, refusing another payload."""
    from rest_framework.exceptions import ValidationError

    views.faults["500"] = 1
    assert api.post("/t/charge/", {}, key="k").status_code == 500

    def refuse(self, request):
        raise ValidationError({"amount": ["No longer valid."]})

    monkeypatch.setattr(views.ChargeView, "post", refuse)
    assert api.post("/t/charge/", {}, key="k").status_code == 400
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("failed", 2)
    assert api.post("/t/charge/", {"amount": 9}, key="k").status_code == 422


def test_lease_mode_duplicate_waits_for_the_first_and_replays(user, monkeypatch):
    entered = threading.Event()
    original = views.ChargeView.post

    def post(self, request):
        entered.set()
        threading.Event().wait(0.3)
        return original(self, request)

    monkeypatch.setattr(views.ChargeView, "post", post)

    def run(i):
        if i == 1:
            entered.wait(10)
        return ApiClient(user.username).post("/t/charge/", {}, key="k")

    first, second = run_concurrently(2, run)

    assert first.status_code == 201
    assert second.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert provider.calls == 1


def _race_a_stale_attempt_against_a_running_retry(user, clock, monkeypatch, stale):
    """Attempt 1 answers ``stale(post, view, request)`` after its lease lapsed
    and attempt 2 re-claimed the key, while attempt 2 is still in its view."""
    slow_entered, retry_entered, stale_done = (threading.Event() for _ in range(3))
    original = views.ChargeView.post
    seen = {}

    def post(self, request):
        if request.idempotency.attempt == 1:
            slow_entered.set()
            retry_entered.wait(10)
            return stale(original, self, request)
        retry_entered.set()
        stale_done.wait(10)
        return original(self, request)

    monkeypatch.setattr(views.ChargeView, "post", post)

    def run(i):
        client = ApiClient(user.username)
        if i == 0:
            try:
                return client.post("/t/charge/", {}, key="k")
            finally:
                # What attempt 1 left behind, read before attempt 2 goes on.
                record = IdempotencyRecord.objects.get()
                seen["record"] = (record.state, record.attempts)
                stale_done.set()
        slow_entered.wait(10)
        clock.advance(seconds=31)
        return client.post("/t/charge/", {}, key="k")

    slow, retry = run_concurrently(2, run)
    return slow, retry, seen["record"]


def test_a_stale_attempt_cannot_complete_while_the_newer_one_runs(
    user, clock, monkeypatch
):
    """The completion is fenced on the attempt, not only on the pending state."""
    slow, retry, left_behind = _race_a_stale_attempt_against_a_running_retry(
        user, clock, monkeypatch, stale=lambda original, *args: original(*args)
    )

    assert slow.status_code == 409
    assert slow.json()["type"].endswith("/lease-lost")
    assert left_behind == ("pending", 2)
    assert retry.status_code == 201
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("completed", 2)
    assert bytes(record.response_body) == retry.content
    # The stale attempt's local write rolled back with its refused completion.
    assert list(Widget.objects.values_list("pk", flat=True)) == [retry.json()["widget"]]


def test_a_stale_attempt_failing_cannot_mark_the_newer_one_failed(
    user, clock, monkeypatch
):
    """The failure write is fenced on the attempt too."""
    from rest_framework.response import Response

    slow, retry, left_behind = _race_a_stale_attempt_against_a_running_retry(
        user,
        clock,
        monkeypatch,
        stale=lambda *args: Response({"error": "late"}, status=500),
    )

    assert slow.status_code == 500
    assert left_behind == ("pending", 2)
    assert retry.status_code == 201
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("completed", 2)
    assert Widget.objects.count() == 1
