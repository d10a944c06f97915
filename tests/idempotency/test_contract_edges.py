"""The HTTP contract's edges in every mode: retries after each kind of
failure, answers that invite a retry, and a key reused while it is held."""

import json
import threading

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import UnitRecord
from tests.conftest import run_concurrently
from tests.signals import listening
from tests.testapp import steps_views, views
from tests.testapp.downstream import provider
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db(transaction=True)

WIDGETS, CHARGE, PAYMENT = "/t/widgets/", "/t/charge/", "/t/payment/"
BODIES = {WIDGETS: {"name": "a"}, CHARGE: {"amount": 5}, PAYMENT: {"amount": 5}}


@pytest.fixture(autouse=True)
def _reset_steps_views():
    steps_views.reset()
    yield
    steps_views.reset()


def test_a_malformed_key_is_refused_where_the_key_is_optional(api):
    # Optional means "send none", never "send anything": a bad key is not
    # read as no key, which would run the request unguarded.
    response = api.post("/t/optional/", {"name": "a"}, key="k1,k2")

    assert response.status_code == 400
    assert json.loads(response.content)["type"].endswith("/key-malformed")
    assert (Widget.objects.count(), IdempotencyRecord.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    ("url", "status"),
    [
        *((WIDGETS, status) for status in (401, 408, 425, 429)),
        *((CHARGE, status) for status in (401, 408, 409, 425, 429)),
    ],
)
def test_an_answer_inviting_a_retry_is_not_stored_and_the_retry_runs(
    api, monkeypatch, url, status
):
    """DESIGN: storable is every status < 500 but 408, 409, 425, 429 (and
    401, which asks for the credentials the retry sends)."""
    monkeypatch.setitem(views.faults, str(status), 1)

    first = api.post(url, BODIES[url], key="k")

    assert first.status_code == status
    assert Widget.objects.count() == 0  # its work rolled back
    assert IdempotencyRecord.objects.get().state == "failed"
    retry = api.post(url, BODIES[url], key="k")
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("status", [500, 503, 409, 429])
def test_a_steps_view_answering_an_error_after_a_step_is_resumed_by_the_retry(
    api, monkeypatch, status
):
    monkeypatch.setitem(views.faults, str(status), 1)  # after the charge step

    assert api.post(PAYMENT, BODIES[PAYMENT], key="k").status_code == status
    assert IdempotencyRecord.objects.get().state == "failed"
    retry = api.post(PAYMENT, BODIES[PAYMENT], key="k")

    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert provider.calls == 1  # the charge came back from its recovery point
    assert Widget.objects.count() == 1
    replay = api.post(PAYMENT, BODIES[PAYMENT], key="k")
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (201, "true")


@pytest.mark.parametrize("status", [500, 409])
def test_a_lease_view_answering_an_error_is_run_again_with_the_same_derived_key(
    api, monkeypatch, status
):
    monkeypatch.setitem(views.faults, str(status), 1)  # after the charge

    assert api.post(CHARGE, BODIES[CHARGE], key="k").status_code == status
    retry = api.post(CHARGE, BODIES[CHARGE], key="k")

    assert retry.status_code == 201
    assert provider.calls == 2
    assert len(provider.charges) == 1  # deduplicated downstream
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("url", [CHARGE, PAYMENT])
def test_another_payload_while_the_first_holds_the_lease_is_422_not_409(api, url):
    """Same key, different payload: 422 and nothing runs, even before the
    first attempt finished (its worker died holding the lease)."""
    views.faults["crash"] = 1
    with pytest.raises(views.SimulatedCrash):
        api.post(url, {"amount": 5}, key="k")

    response = api.post(url, {"amount": 6}, key="k")

    assert response.status_code == 422
    assert json.loads(response.content)["type"].endswith("/key-reused")
    assert "Retry-After" not in response
    assert provider.calls == 1
    assert IdempotencyRecord.objects.get().attempts == 1


@pytest.mark.parametrize("url", [CHARGE, PAYMENT])
def test_retry_after_on_a_held_key_is_the_lease_left_in_whole_seconds(
    api, clock, settings, url
):
    settings.IDEMPOTENCY = {"WAIT": 0.001}  # answered at once, not after a wait
    views.faults["crash"] = 1  # dies holding a 30 s lease
    with pytest.raises(views.SimulatedCrash):
        api.post(url, {"amount": 5}, key="k")

    clock.advance(seconds=10.5)
    response = api.post(url, {"amount": 5}, key="k")

    assert response.status_code == 409
    assert json.loads(response.content)["type"].endswith("/request-in-flight")
    assert response["Retry-After"] == "20"  # 19.5 s left, rounded up


def test_a_retry_while_an_operator_compensates_the_unit_is_409_then_abandoned(
    api, user, abandon_in_console, clock
):
    retry, _heard = _retry_while_the_console_refunds(
        api, user, abandon_in_console, clock
    )

    assert retry.status_code == 409
    assert json.loads(retry.content)["type"].endswith("/request-in-flight")
    assert retry["Retry-After"].isdigit()
    after = api.post(PAYMENT, BODIES[PAYMENT], key="k")
    assert after.status_code == 422
    assert json.loads(after.content)["type"].endswith("/operation-abandoned")
    assert len(steps_views.refunds) == 1
    assert UnitRecord.objects.get().state == "compensated"


def test_a_retry_held_off_by_a_compensation_is_reported_as_a_conflict_only(
    api, user, abandon_in_console, clock
):
    # Nothing of the view ran and nothing raised: no key_failed ("raised",
    # 500, logged as a WARNING) beside the 409's key_conflict.
    _retry, heard = _retry_while_the_console_refunds(
        api, user, abandon_in_console, clock
    )

    keys = [name for name in heard.names() if name.startswith("key_")]
    assert keys == ["key_claimed", "key_conflict"]


def _retry_while_the_console_refunds(api, user, abandon_in_console, clock):
    """The retry a client sends while an operator's abandon refunds the
    charge of its stuck unit; the signals that retry sent."""
    from .test_steps_mode import unit_of

    views.faults["crash"] = 1  # dies after the charge, holding its lease
    with pytest.raises(views.SimulatedCrash):
        api.post(PAYMENT, BODIES[PAYMENT], key="k")
    clock.advance(seconds=31)  # stuck mid-steps: an operator abandons it
    refunding, refunded = threading.Event(), threading.Event()

    def hold_the_refund(step):
        if step == "undo:charge":
            refunding.set()
            refunded.wait(10)

    steps_views.on_call.append(hold_the_refund)

    def run(i):
        if i == 0:
            return abandon_in_console(unit_of(user).identity)
        refunding.wait(10)
        try:  # the client retries while the refund runs
            return api.post(PAYMENT, BODIES[PAYMENT], key="k")
        finally:
            refunded.set()

    with listening() as heard:
        retry = run_concurrently(2, run)[1]
    return retry, heard


def test_an_async_view_that_raised_runs_again_on_the_retry(user):
    client = AsyncClient()
    client.force_login(user)

    def send(name="a"):
        return async_to_sync(client.post)(
            "/t/async/",
            {"name": name},
            content_type="application/json",
            headers={"Idempotency-Key": "k"},
        )

    views.faults["raise"] = 1
    with pytest.raises(RuntimeError):
        send()
    assert Widget.objects.count() == 0
    assert IdempotencyRecord.objects.get().state == "failed"

    assert send(name="b").status_code == 422  # the failed key keeps its hash
    retry = send()
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry
    assert Widget.objects.count() == 1
