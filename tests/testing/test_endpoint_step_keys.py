"""A steps-mode view whose step calls out under a key of its own (``uuid4()``,
not the ``key`` it is given), with sound, keyed undos: only a death between
the call and the step's recovery point shows it. ``EndpointSuite``'s
crash-after-each-step case dies there too, as the consumer and webhook crash
cases do, and names the step."""

import pytest

from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from tests.testing.helpers import broken_message
from tests.testing.sound import standing

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
]


@pytest.fixture(autouse=True)
def _fakes(fakes):
    """The fake services run for every test here (tests/conftest.py)."""


def charging(url, fakes) -> Endpoint:
    return Endpoint(url=url, payload={"amount": 500}, effects=lambda: standing(fakes))


def test_the_case_holds_for_steps_calling_out_with_their_key(fakes):
    endpoints.check_crash_after_each_step(
        charging("/sound/charges-and-reserves/", fakes)
    )


def test_a_step_calling_out_under_its_own_key_is_reported(fakes):
    endpoint = charging("/broken/charges-under-its-own-key/", fakes)

    message = broken_message(endpoints.check_crash_after_each_step, endpoint)

    assert message.startswith(
        "Guarantee broken: a steps-mode view killed right after any of its steps "
        "runs each step's effect once in the end"
    )
    assert "(the recovery point of step 'charge'), then retried: " in message
    assert "charge: the effect was applied twice" in message
    assert "its outside call must pass the key it is given" in message
    assert "reserved:" not in message  # the atomic step held
