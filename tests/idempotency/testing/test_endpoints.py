"""The endpoint checks pass on guarded views and name what broken views break."""

import re
from datetime import timedelta
from unittest import mock

import pytest

from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from tests.testing.helpers import broken_message, new_widget, widget_count

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
]

CHARGE = "tests.testapp.downstream.provider.charge"
BY_NAME = {"ids": lambda check: check.__name__}


def widgets(url="/t/widgets/", **options) -> Endpoint:
    return Endpoint(url=url, payload=new_widget, effects=widget_count, **options)


def charges(url="/t/charge/", **options) -> Endpoint:
    """The lease-mode views: a downstream charge, then a local widget."""
    return Endpoint(
        url=url,
        payload={"amount": 500},
        effects=widget_count,
        downstream=CHARGE,
        downstream_key=lambda key, amount: key,
        **options,
    )


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_guarded_viewset(check):
    check(widgets(invalid_payload={"name": ""}, retry_horizon=timedelta(hours=1)))


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_lease_mode_view_calling_downstream(check):
    check(charges(invalid_payload={"amount": 0}))


def test_an_unguarded_view_runs_again_after_a_lost_response():
    message = broken_message(
        endpoints.check_lost_response, widgets("/broken/unguarded/")
    )

    assert message.startswith(
        "Guarantee broken: a retry after a lost response replays the stored "
        "answer and runs nothing.\n"
    )
    assert "the view ran again: effects went 0 → 2 (expected 0 → 1)" in message
    assert "the retry carries no Idempotent-Replayed: true" in message
    assert re.search(r"first answer: 201 \{.*\} \(not replayed\)", message)


@pytest.mark.postgresql
def test_a_check_then_act_view_passes_in_sequence_and_loses_the_race():
    check_then_act = widgets("/broken/check-then-act/")
    endpoints.check_lost_response(check_then_act)  # its hand-made replay works

    message = broken_message(endpoints.check_race, check_then_act)

    assert message.startswith(
        "Guarantee broken: identical requests racing on one key make one effect"
    )
    assert re.search(
        r"8 requests at once: effects went 2 → ([3-9]|10) \(expected 2 → 3\)", message
    )
    assert re.search(r"\n  [2-8] answers came from running the view, not 1", message)


def notify_fails():
    return mock.patch(
        "tests.testing.broken.notify", side_effect=ConnectionError("it is down")
    )


def test_a_failing_step_after_the_write_answers_500_and_rolls_back():
    endpoints.check_failed_attempt(widgets("/broken/five-hundred/", fail=notify_fails))


def test_a_view_storing_its_500_keeps_the_half_done_write(settings):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testing.broken.store_everything"}
    endpoint = widgets("/broken/five-hundred/", fail=notify_fails)

    message = broken_message(endpoints.check_failed_attempt, endpoint)

    assert message.startswith(
        "Guarantee broken: a failed attempt leaves no effect, and its retry runs."
    )
    assert "failure: the endpoint's fail(); the attempt answered 500" in message
    assert (
        "the failed attempt left its effect: effects went 1 → 2 (expected 1 → 1)"
        in message
    )
    assert "the retry got the failed attempt's answer, replayed" in message


def test_an_unguarded_view_keeps_the_write_of_a_failed_attempt():
    message = broken_message(
        endpoints.check_failed_attempt, widgets("/broken/unguarded/")
    )

    assert "the attempt raised InjectedFailure" in message
    assert "the failed attempt left its effect" in message


def test_a_view_answering_its_own_400_blocks_the_corrected_retry():
    endpoint = widgets("/broken/bad-request/", invalid_payload={"name": ""})

    message = broken_message(endpoints.check_validation_failure, endpoint)

    assert message.startswith(
        "Guarantee broken: a request that failed validation is not stored: the "
        "corrected retry with the same key runs."
    )
    assert "the corrected retry did not run: 422" in message
    assert "raise ValidationError" in message


def test_a_fingerprint_without_a_field_that_matters_replays_another_payload():
    endpoint = widgets("/broken/excludes-name/", changed_payload={"name": "other"})

    message = broken_message(endpoints.check_payload_mismatch, endpoint)

    assert message.startswith(
        "Guarantee broken: the same key with another payload is refused with 422."
    )
    assert "the reused key answered 201" in message
    assert "(replayed), not 422" in message


def test_one_scope_for_everyone_serves_alice_s_answer_to_bob(settings):
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": "tests.testing.broken.one_scope_for_all"}

    message = broken_message(endpoints.check_other_scope, widgets())

    assert message.startswith(
        "Guarantee broken: a stored answer is never returned to another scope."
    )
    assert "bob's request with alice's key got alice's stored answer" in message


def test_a_ttl_shorter_than_the_clients_retries_is_reported():
    # @idempotent(ttl=60) on the function view; the client retries for a day.
    endpoint = widgets("/t/function/", retry_horizon=timedelta(days=1))

    message = broken_message(endpoints.check_expiry, endpoint)

    assert message.startswith(
        "Guarantee broken: a key outlives every retry the client can still send."
    )
    assert "the key expires 0:01:00 after the first request" in message
    assert "retries for 1 day, 0:00:00 (retry_horizon)" in message
    assert "effects went 0 → 2 (expected 0 → 1)" in message


def test_an_unguarded_view_stores_no_record_to_expire():
    message = broken_message(endpoints.check_expiry, widgets("/broken/unguarded/"))

    assert "no idempotency record was stored" in message


def test_a_downstream_key_made_per_attempt_charges_twice():
    message = broken_message(
        endpoints.check_derived_key, charges("/broken/underived-charge/")
    )

    assert message.startswith(
        "Guarantee broken: a step retried after a crash calls downstream with the "
        "same derived key."
    )
    assert f"the retry called {CHARGE} with another key" in message
    assert "the provider sees two requests" in message


def test_the_clients_own_key_handed_downstream_is_reported():
    message = broken_message(
        endpoints.check_derived_key, charges("/broken/client-key-charge/")
    )

    assert "is the client's Idempotency-Key itself" in message
    assert "request.idempotency.derive(step)" in message
