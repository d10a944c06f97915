"""The proof kit's steps case for keyed endpoints: a steps-mode view killed
right after each of its steps, then retried, makes each effect once; one that
mails outside ``request.idempotency.step()`` is caught."""

import pytest

from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from tests.testapp.models import Payment
from tests.testing.helpers import broken_message, widget_count

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
]


@pytest.fixture(autouse=True)
def _fakes(fakes):
    """The fake services run for every test here (tests/conftest.py)."""


def payment():
    return {"amount": 500, "email": "buyer@example.com"}


def test_the_case_holds_for_the_payment_view(fakes):
    def effects():
        return {
            "charge": fakes.effects.count("charge"),
            "payment": Payment.objects.count(),
        }

    endpoints.check_crash_after_each_step(
        Endpoint(url="/t/payments/", payload=payment, effects=effects)
    )


@pytest.mark.parametrize(
    "check",
    [endpoints.check_failed_attempt, endpoints.check_failure_at_completion],
    ids=lambda check: check.__name__,
)
def test_a_failed_attempt_keeps_its_done_steps_and_the_retry_resumes(fakes, check):
    """A steps-mode view failing after its steps keeps their effects by
    design (each step's recovery point committed); its retry resumes past
    them, so each effect happens once in the end."""

    def effects():
        return {
            "charge": fakes.effects.count("charge"),
            "payment": Payment.objects.count(),
        }

    check(Endpoint(url="/t/payments/", payload=payment, effects=effects))


def test_a_late_retry_of_the_payment_view_runs_as_new(fakes):
    """Past the TTL the view runs again: a new payment, while the provider
    answers the charge step's same derived key with the first charge."""

    def effects():
        return {
            "charge": fakes.effects.count("charge"),
            "payment": Payment.objects.count(),
        }

    endpoints.check_expiry(
        Endpoint(url="/t/payments/", payload=payment, effects=effects)
    )


def test_the_case_catches_a_view_that_mails_outside_its_steps(fakes):
    def effects():
        return {name: fakes.effects.count(name) for name in ("charge", "mail")}

    endpoint = Endpoint(
        url="/broken/mails-outside-steps/", payload=payment, effects=effects
    )
    endpoints.check_lost_response(endpoint)  # a plain retry looks fine

    message = broken_message(endpoints.check_crash_after_each_step, endpoint)

    assert message.startswith(
        "Guarantee broken: a steps-mode view killed right after any of its steps "
        "runs each step's effect once in the end"
    )
    assert "its steps: charge, note" in message
    assert (
        "killed right after step 'note', then retried: mail: the effect was "
        "applied twice" in message
    )
    assert "charge:" not in message  # the provider's step held


def test_the_case_is_skipped_for_a_view_without_steps():
    with pytest.raises(pytest.skip.Exception, match="ran no step"):
        endpoints.check_crash_after_each_step(
            Endpoint(url="/t/widgets/", payload={"name": "w"}, effects=widget_count)
        )
