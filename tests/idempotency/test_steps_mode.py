"""Keys in steps mode: a keyed request whose outside calls are durable steps."""

import json
from datetime import timedelta

import pytest

from idempotency.claims import Claim
from idempotency.decorators import idempotent
from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import StepRecord, UnitRecord
from idempotency.shared.units import KEYS, Unit
from inbox.api import receive_steps
from tests.conftest import ApiClient, run_concurrently
from tests.testapp import steps_views, views
from tests.testapp.downstream import provider
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/t/payment/"


@pytest.fixture(autouse=True)
def _reset_views():
    steps_views.reset()
    yield
    steps_views.reset()


def unit_of(user, key="k"):
    return Unit(KEYS, (f"user:{user.pk}", "payment.create", key))


def steps_of(user, key="k"):
    return dict(
        StepRecord.objects.filter(unit_id=unit_of(user, key).identity).values_list(
            "name", "state"
        )
    )


def charge_ids():
    return [charge for charge, _amount in provider.charges.values()]


def test_each_step_runs_once_and_the_answer_is_stored(api, user):
    response = api.post(URL, {"amount": 500}, key="k")

    assert response.status_code == 201
    assert len(provider.charges) == 1
    assert list(provider.charges) == [unit_of(user).derive("charge")]
    assert Widget.objects.count() == 1
    assert steps_views.mails == charge_ids()
    assert steps_of(user) == {"charge": "done", "payment": "done", "mail": "done"}
    unit = UnitRecord.objects.get()
    assert (unit.state, unit.attempt, unit.lease_expires_at) == ("done", 1, None)
    assert "k" not in unit.label.split()  # no raw key in the step log
    assert IdempotencyRecord.objects.get().state == "completed"

    replay = api.post(URL, {"amount": 500}, key="k")
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == response.content
    assert provider.calls == 1


def test_a_retry_after_a_failure_resumes_at_the_first_unfinished_step(api, user):
    views.faults["raise"] = 1  # fails after the charge's recovery point
    with pytest.raises(RuntimeError):
        api.post(URL, {"amount": 500}, key="k")
    assert IdempotencyRecord.objects.get().state == "failed"  # released
    assert steps_of(user) == {"charge": "done"}

    retry = api.post(URL, {"amount": 500}, key="k")

    assert retry.status_code == 201
    assert provider.calls == 1  # the charge came back from its recovery point
    assert Widget.objects.count() == 1
    assert steps_views.mails == charge_ids()
    assert UnitRecord.objects.get().attempt == 2


def test_a_validation_failure_after_a_step_keeps_its_recovery_point(api, user):
    # Not "invalid before any mutation": the charge went out. The key stays
    # (failed) so the retry resumes past the charge, and another payload
    # under it is refused instead of starting the unit anew.
    views.faults["invalid"] = 1
    assert api.post(URL, {"amount": 500}, key="k").status_code == 400
    assert IdempotencyRecord.objects.get().state == "failed"
    assert steps_of(user) == {"charge": "done"}

    assert api.post(URL, {"amount": 900}, key="k").status_code == 422
    retry = api.post(URL, {"amount": 500}, key="k")

    assert retry.status_code == 201
    assert provider.calls == 1
    assert (Widget.objects.count(), steps_views.mails) == (1, charge_ids())


def test_a_crashed_attempt_is_resumed_once_its_lease_lapses(api, user, clock):
    views.faults["crash"] = 1
    with pytest.raises(views.SimulatedCrash):
        api.post(URL, {"amount": 500}, key="k")

    assert api.post(URL, {"amount": 500}, key="k").status_code == 409  # leased
    clock.advance(seconds=31)
    retry = api.post(URL, {"amount": 500}, key="k")

    assert retry.status_code == 201
    assert (provider.calls, Widget.objects.count(), steps_views.mails) == (
        1,
        1,
        charge_ids(),
    )


def test_the_view_runs_in_no_transaction_so_a_step_is_not_refused(api):
    # A view wrapped in atomic() would raise StepInTransaction at the charge.
    assert api.post(URL, {"amount": 500}, key="k").status_code == 201


@pytest.fixture
def atomic_requests(monkeypatch):
    from django.db import connection

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)


def test_a_steps_view_under_atomic_requests_is_refused_before_any_claim(
    api, atomic_requests
):
    # Django wraps the view in atomic(); every step would be refused.
    with pytest.raises(IdempotencyConfigurationError, match="non_atomic_requests"):
        api.post(URL, {"amount": 500}, key="k")
    assert not IdempotencyRecord.objects.exists()
    assert not UnitRecord.objects.exists()
    assert provider.calls == 0


def test_a_views_ttl_longer_than_unit_retention_is_refused_before_any_step(
    api, settings, monkeypatch
):
    # Its finished units would be purged while its keys still bring retries.
    settings.IDEMPOTENCY = {"UNIT_RETENTION": timedelta(days=2)}
    monkeypatch.setattr(steps_views.PaymentView, "idempotency_ttl", 3 * 86400)

    with pytest.raises(IdempotencyConfigurationError, match="UNIT_RETENTION"):
        api.post(URL, {"amount": 500}, key="k")
    assert not IdempotencyRecord.objects.exists()
    assert not UnitRecord.objects.exists()
    assert provider.calls == 0


def test_a_steps_view_that_does_not_require_a_key_is_refused_where_it_is_built():
    # A keyless request would run the view with no unit: its first step, or
    # its Abandon, answered 500.
    with pytest.raises(IdempotencyConfigurationError, match="needs a key"):
        steps_views.PaymentView.as_view(idempotency_required=False)
    with pytest.raises(IdempotencyConfigurationError, match="The required of 'op'"):
        idempotent("op", mode="steps", required=False)(lambda request: None)
    idempotent("op", mode="lease", required=False)(lambda request: None)


def test_a_decorated_steps_views_ttl_is_compared_with_unit_retention(settings):
    # What @idempotent(mode="steps", ttl=...) builds; the mixin's is the same.
    from idempotency.claims import STEPS, Policy, operation_ttl

    settings.IDEMPOTENCY = {"UNIT_RETENTION": timedelta(days=2)}
    within = Policy("op", scope=None, mode=STEPS, ttl=timedelta(days=2))
    beyond = Policy("op", scope=None, mode=STEPS, ttl=timedelta(days=3))
    atomic = Policy("op", scope=None, ttl=timedelta(days=3))

    assert operation_ttl(within) == timedelta(days=2)
    assert operation_ttl(atomic) == timedelta(days=3)
    with pytest.raises(IdempotencyConfigurationError, match="The ttl of 'op'"):
        operation_ttl(beyond)


def test_a_non_atomic_steps_view_runs_under_atomic_requests(
    api, atomic_requests, monkeypatch
):
    from django.urls import resolve

    view = resolve(URL).func
    monkeypatch.setattr(view, "_non_atomic_requests", {"default"}, raising=False)

    assert api.post(URL, {"amount": 500}, key="k").status_code == 201


def test_abandon_compensates_and_its_answer_is_replayed(api, user):
    response = api.post(URL, {"amount": 500, "ship": False}, key="k")

    assert response.status_code == 422
    problem = json.loads(response.content)
    assert problem["type"].endswith("/operation-abandoned")
    assert problem["detail"] == "No carrier takes this parcel."
    assert steps_views.refunds == [(unit_of(user).derive("undo:charge"), *charge_ids())]
    assert UnitRecord.objects.get().state == "compensated"
    assert steps_of(user) == {"charge": "undone", "undo:charge": "done"}

    replay = api.post(URL, {"amount": 500, "ship": False}, key="k")
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (422, "true")
    assert len(steps_views.refunds) == 1
    assert Widget.objects.count() == 0


def test_a_retry_after_an_operator_abandoned_the_stuck_unit_answers_abandoned(
    api, user, abandon_in_console, clock
):
    views.faults["crash"] = 1  # dies after the charge, before the payment
    with pytest.raises(views.SimulatedCrash):
        api.post(URL, {"amount": 500}, key="k")
    clock.advance(seconds=31)  # its lease lapses: stuck mid-steps
    abandon_in_console(unit_of(user).identity)

    retry = api.post(URL, {"amount": 500}, key="k")
    again = api.post(URL, {"amount": 500}, key="k")

    assert retry.status_code == 422
    assert json.loads(retry.content)["type"].endswith("/operation-abandoned")
    assert (again.status_code, again["Idempotent-Replayed"]) == (422, "true")
    # Refunded once, under the undo's key; nothing after the charge ever ran.
    assert steps_views.refunds == [(unit_of(user).derive("undo:charge"), *charge_ids())]
    assert (provider.calls, Widget.objects.count(), steps_views.mails) == (1, 0, [])


def test_a_retry_that_calls_no_step_still_runs_the_undos_its_unit_owes(
    api, user, abandon_in_console, clock
):
    views.faults["crash"] = 1  # dies after the charge, before the payment
    with pytest.raises(views.SimulatedCrash):
        api.post(URL, {"amount": 500}, key="k")
    clock.advance(seconds=31)  # its lease lapses: stuck mid-steps

    def refund_fails_once(step):
        steps_views.on_call.remove(refund_fails_once)
        raise ConnectionError("the provider is down")

    steps_views.on_call.append(refund_fails_once)
    abandon_in_console(unit_of(user).identity)
    assert UnitRecord.objects.get().state == "compensating"  # the refund owed
    steps_views.answer_early.append(True)  # the retry takes another branch

    retry = api.post(URL, {"amount": 500}, key="k")

    assert retry.status_code == 422
    assert json.loads(retry.content)["type"].endswith("/operation-abandoned")
    assert steps_views.refunds == [(unit_of(user).derive("undo:charge"), *charge_ids())]
    assert UnitRecord.objects.get().state == "compensated"


def test_steps_renew_the_keys_lease_so_a_slow_view_is_not_taken_over(api, user, clock):
    # Each outside call takes 20 s of a 30 s lease; a duplicate arrives 40 s in.
    duplicate = []
    steps_views.on_call.append(lambda step: clock.advance(seconds=20))

    def send_duplicate(step):
        if step == "mail":
            duplicate.append(
                run_concurrently(
                    1,
                    lambda i: ApiClient(user.username).post(
                        URL, {"amount": 500}, key="k"
                    ),
                )[0]
            )

    steps_views.on_call.append(send_duplicate)

    response = api.post(URL, {"amount": 500}, key="k")

    assert duplicate[0].status_code == 409  # the lease was renewed at 20 s
    assert response.status_code == 201
    assert steps_views.mails == charge_ids()


def test_a_step_outside_steps_mode_is_a_configuration_error():
    claim = Claim(
        key="k", scope="user:1", operation="op", request_hash="h", expires_at=None
    )
    with pytest.raises(IdempotencyConfigurationError, match="mode='steps'"):
        claim.step("charge", lambda key: None)


def test_an_expired_key_starts_its_steps_over(api, user, clock):
    api.post(URL, {"amount": 500}, key="k")
    clock.advance(timedelta(hours=25))  # past the key's TTL: a new intent

    assert api.post(URL, {"amount": 500}, key="k").status_code == 201
    assert steps_views.mails == charge_ids() * 2  # the mail step ran again


def test_a_key_past_its_ttl_is_not_taken_while_its_lease_runs(
    api, user, clock, settings
):
    """Steps renew the key's lease but not its TTL: a slow view may still
    hold a live lease once its key expires. A duplicate then is in flight
    (409), as the purge already judges it, not a new intent that starts the
    unit over under the running attempt and calls out again."""
    settings.IDEMPOTENCY = {"TTL": 60, "LEASE": 50}
    duplicate = []
    # The charge takes 40 s (the lease is renewed after it, to 90 s), the
    # mail 30 s: the duplicate arrives at 70 s, past the key's TTL.
    delays = {"charge": 40, "mail": 30}
    steps_views.on_call.append(lambda step: clock.advance(seconds=delays[step]))

    def send_duplicate(step):
        if step == "mail" and not duplicate:
            duplicate.append(None)
            duplicate[0] = run_concurrently(
                1,
                lambda i: ApiClient(user.username).post(URL, {"amount": 500}, key="k"),
            )[0]

    steps_views.on_call.append(send_duplicate)

    response = api.post(URL, {"amount": 500}, key="k")

    assert duplicate[0].status_code == 409
    assert response.status_code == 201
    assert len(steps_views.mails) == 1


def test_a_claim_that_stalls_past_its_lease_before_its_steps_leaves_the_newer_ones(
    api, user, clock, monkeypatch
):
    """The first request claims a new key, then stalls (a GC pause, a slow
    host) past its lease before its unit begins; a retry takes the key over
    and runs every step. The stalled request must not then start the unit
    over as a new key's: it would wipe the retry's recovery points and write
    the payment a second time."""
    import threading

    from django.db import connections

    from idempotency import stepping

    begin = stepping.begin
    stalled, resume = threading.Event(), threading.Event()

    def stalling_begin(claim, records):
        if not stalled.is_set():
            stalled.set()
            resume.wait(30)
        return begin(claim, records)

    monkeypatch.setattr(stepping, "begin", stalling_begin)
    first = []

    def send_first():
        try:
            first.append(ApiClient(user.username).post(URL, {"amount": 500}, key="k"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=send_first)
    thread.start()
    assert stalled.wait(30)
    clock.advance(seconds=31)  # past the first request's lease

    retry = api.post(URL, {"amount": 500}, key="k")
    resume.set()
    thread.join(30)

    assert retry.status_code == 201
    assert first[0].status_code == 409  # its key was taken over: lease lost
    assert Widget.objects.count() == 1
    assert steps_views.mails == charge_ids()
    assert steps_of(user) == {"charge": "done", "payment": "done", "mail": "done"}


def test_a_key_past_its_ttl_does_not_drop_the_undos_its_unit_still_owes(
    api, user, clock, monkeypatch
):
    """A unit left compensating (its refund failed) still owes that refund,
    whatever its key's age: the purge keeps it for that. A new request under
    the expired key must not start the unit over, which would drop the
    undone charge from the step log and the refund with it."""
    from idempotency.shared.steps import CompensationFailed, compensate

    views.faults["crash"] = 1  # dies after the charge, before the payment
    with pytest.raises(views.SimulatedCrash):
        api.post(URL, {"amount": 500}, key="k")
    clock.advance(seconds=31)  # its lease lapses: stuck mid-steps

    def provider_down(key, charge):
        raise ConnectionError("the provider is down")

    with monkeypatch.context() as patched:
        patched.setattr(steps_views, "refund", provider_down)
        with pytest.raises(CompensationFailed):
            compensate(unit_of(user).identity, "operator")
    assert UnitRecord.objects.get().state == "compensating"

    clock.advance(timedelta(hours=25))  # past the key's TTL
    response = api.post(URL, {"amount": 500}, key="k")

    assert steps_views.refunds == [(unit_of(user).derive("undo:charge"), *charge_ids())]
    assert UnitRecord.objects.get().state == "compensated"
    assert response.status_code == 422
    assert json.loads(response.content)["type"].endswith("/operation-abandoned")
    assert Widget.objects.count() == 0


def test_a_request_refused_as_invalid_before_any_step_leaves_no_stuck_unit(
    api, user, clock
):
    """A 400 before any step is not kept (the key is withdrawn, as at
    Stripe). Its unit must go with it: left running, it would show as stuck
    mid-steps on the dashboard once its lease lapsed, with nothing to release
    or abandon, and the purge, which keeps running units, would never take it."""
    from idempotency.console.units import stuck
    from idempotency.shared import clock as apps_clock

    assert api.post(URL, {"amount": 0}, key="k").status_code == 400
    clock.advance(seconds=31)

    assert not IdempotencyRecord.objects.exists()
    assert not stuck(UnitRecord.objects.all(), apps_clock.now()).exists()
    assert not UnitRecord.objects.exists()

    # The corrected retry under the key runs as new.
    assert api.post(URL, {"amount": 500}, key="k").status_code == 201


# A tenant's slug from a custom SCOPE_RESOLVER.
tenant = {"slug": "inbox"}


def tenant_scope(request):
    return tenant["slug"]


@pytest.fixture
def scoped_inbox(settings):
    # A keyed request in scope "inbox" names the same parts as the inbox's
    # delivery of message "k" to a subscriber named after its operation.
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": f"{__name__}.tenant_scope"}


def test_a_scope_named_inbox_never_resumes_an_inbox_deliverys_steps(
    api, scoped_inbox, clock
):
    with pytest.raises(RuntimeError), receive_steps("payment.create", "k") as d:
        d.step("charge", lambda key: "ch_of_the_delivery")
        raise RuntimeError("the consumer failed after its charge")
    clock.advance(hours=1)  # the delivery's lease lapsed: a retry would resume

    response = api.post(URL, {"amount": 500}, key="k")

    assert response.status_code == 201
    assert provider.calls == 1  # its own charge, not the delivery's
    assert json.loads(response.content)["charge"] != "ch_of_the_delivery"
    assert UnitRecord.objects.count() == 2
    # Nor did it start the delivery's unit over: its retry resumes its charge.
    clock.advance(hours=1)
    with receive_steps("payment.create", "k") as retry:
        assert retry.step("charge", lambda key: "ch_again") == "ch_of_the_delivery"


def test_an_inbox_delivery_never_resumes_the_steps_of_a_scope_named_inbox(
    api, scoped_inbox
):
    assert api.post(URL, {"amount": 500}, key="k").status_code == 201
    charged = []

    with receive_steps("payment.create", "k") as delivery:
        assert not delivery.duplicate
        delivery.step("charge", lambda key: charged.append(key) or "ch_2")

    assert len(charged) == 1  # its own charge, not the request's
    assert UnitRecord.objects.count() == 2


@pytest.mark.parametrize("scope", ["tenant\x1f1", "\x1finbox"])
def test_a_scope_holding_the_unit_separator_is_refused_before_anything_runs(
    api, scoped_inbox, monkeypatch, scope
):
    # Its parts would run into the operation's: one unit for two scopes, or
    # for a scope and another kind's unit.
    monkeypatch.setitem(tenant, "slug", scope)

    with pytest.raises(IdempotencyConfigurationError, match="separator"):
        api.post(URL, {"amount": 500}, key="k")
    assert not IdempotencyRecord.objects.exists()
    assert not UnitRecord.objects.exists()
    assert provider.calls == 0


def test_a_request_whose_lapsed_lease_a_retry_took_does_not_give_the_unit_up(
    api, user, clock, monkeypatch
):
    # Between two steps the request runs past its lease, and a retry takes
    # the key over (it has not joined the unit yet). The request then
    # raises Abandon: it must write nothing more, not refund the charge the
    # retry resumes after.
    from django.db.models import F

    from idempotency.conf import idempotency_settings

    def taken_over():
        clock.advance(idempotency_settings.LEASE + timedelta(seconds=1))
        # What the retry's claim does: the next attempt, its own lease.
        IdempotencyRecord.objects.update(
            attempts=F("attempts") + 1,
            locked_until=clock.now() + idempotency_settings.LEASE,
        )

    monkeypatch.setattr(steps_views, "_maybe_fail", taken_over)

    response = api.post(URL, {"amount": 500, "ship": False}, key="k")

    assert response.status_code == 409
    assert steps_views.refunds == []  # nothing undone
    assert UnitRecord.objects.get().state == "running"
    assert steps_of(user) == {"charge": "done"}
