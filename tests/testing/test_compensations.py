"""The proof kit's compensation case: a unit of steps (a keyed request's, a
steps consumer's, a steps handler's) abandoned after its steps ran, and
again after its compensation died midway, undoes each step's effect once,
last first; each way teams get the undos wrong is caught and said."""

import uuid

import pytest
from django.test import TransactionTestCase, override_settings

from idempotency.shared.testing.guarantees import CannotCheck, GuaranteeBroken
from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from idempotency.testing.suites import EndpointSuite
from inbox.testing import consumers
from inbox.testing.consumers import Consumer
from inbox.testing.suites import ConsumerSuite
from tests.fakes import URL_VARIABLE, fake_services
from tests.testapp.models import Payment
from tests.testing import broken, sound
from tests.testing.helpers import broken_message, widget_count
from tests.testing.sound import charge_and_reserve, standing
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks import handlers
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
    pytest.mark.usefixtures("handler_registry"),
]

GUARANTEE = (
    "Guarantee broken: a steps-mode view's unit that gives up undoes each "
    "completed step's effect exactly once, last step first, also when its "
    "compensation dies midway and is resumed."
)


SOURCE = "kit-undos"
SOURCES = {SOURCE: {"VERIFIER": "hmac", "SECRETS": ["kit-undos-0123456789"]}}


@pytest.fixture(autouse=True)
def _fakes(fakes):
    """The fake services run for every test here (tests/conftest.py)."""


def charging(url, fakes, **given) -> Endpoint:
    return Endpoint(
        url=url, payload={"amount": 500}, effects=lambda: standing(fakes), **given
    )


def test_the_case_holds_for_keyed_idempotent_undos(fakes):
    endpoints.check_abandon_undoes_each_step(
        charging("/sound/charges-and-reserves/", fakes)
    )
    # Each unit's charge was refunded: one probe, one abandon, one per undo
    # died midway and resumed, each refund once.
    assert fakes.effects.count("charge") == fakes.effects.count("refund") + 1


def test_the_case_holds_for_the_payment_view_keeping_its_capture(fakes):
    """The payment flow's capture step has no undo: abandoned after it, the
    payment stays, which the view's owner says is meant (``kept_steps``)."""

    def effects():
        return {
            "charge": fakes.effects.count("charge") - fakes.effects.count("refund"),
            "payment": Payment.objects.count(),
        }

    def payment():
        return {"amount": 500, "email": "buyer@example.com"}

    endpoint = Endpoint(url="/t/payments/", payload=payment, effects=effects)
    endpoints.check_abandon_undoes_each_step(
        Endpoint(**{**vars(endpoint), "kept_steps": ("capture",)})
    )

    message = broken_message(endpoints.check_abandon_undoes_each_step, endpoint)

    assert "step 'capture' moved effects (payment +1) and has no undo" in message
    assert "list the step in kept_steps" in message


def report_of(check, subject, owner="steps-mode view") -> str:
    """``check`` run on ``subject``, which must fail: its report, naming the
    guarantee of ``owner``'s units."""
    message = broken_message(check, subject)
    assert message.startswith(GUARANTEE.replace("steps-mode view", owner))
    return message


def keys_report(url, fakes) -> str:
    return report_of(endpoints.check_abandon_undoes_each_step, charging(url, fakes))


def test_a_missing_undo_is_caught(fakes):
    message = keys_report("/broken/no-refund/", fakes)

    assert "its steps: charge, reserve; killed right after the last one" in message
    assert (
        "step 'charge' moved effects (charge +1) and has no undo: the unit gave "
        "up and its effect stays. Give the step undo=" in message
    )
    assert "'reserve'" not in message.partition("\n")[2].partition("\n")[2]


@pytest.mark.parametrize(
    ("url", "step", "effect"),
    [
        ("/broken/unkeyed-refund/", "charge", "charge"),  # not keyed
        ("/broken/ledger-release/", "reserve", "reserved"),  # not idempotent
    ],
)
def test_an_undo_repeating_its_effect_when_resumed_is_caught(fakes, url, step, effect):
    message = keys_report(url, fakes)

    assert (
        f"the compensation died right after the undo of step {step!r} returned, "
        f"before its recovery point, and the unit was abandoned again: {effect}: "
        "the effect was undone twice: effects went 2 → 0 (expected 2 → 1)"
    ) in message
    assert (
        "pass the key it is given (undo(key, result)) to the provider as its "
        "idempotency key, and make the undo idempotent" in message
    )
    assert message.count("the compensation died") == 1  # the other undo holds


def test_undos_undoing_each_others_steps_are_caught(fakes):
    message = keys_report("/broken/swapped-undos/", fakes)

    assert (
        "the undo of step 'reserve' (run first) undid step 'charge''s effect, "
        "not its own: the effects were undone in the wrong order"
    ) in message
    assert "the undo of step 'charge' (run number 2) undid step 'reserve''s" in message


def test_an_undo_raising_every_time_is_caught(fakes):
    message = keys_report("/broken/raising-undo/", fakes)

    assert "an undo raised every time the unit was abandoned: The undo of step " in (
        message
    )
    assert "the warehouse refuses to release it" in message
    assert "Stuck mid-steps, the unit never ends compensated" in message


def test_the_case_is_skipped_for_a_view_without_steps():
    with pytest.raises(pytest.skip.Exception, match="ran no step"):
        endpoints.check_abandon_undoes_each_step(
            Endpoint(url="/t/widgets/", payload={"name": "w"}, effects=widget_count)
        )


def test_the_case_needs_effects_that_the_steps_move(fakes):
    with pytest.raises(CannotCheck, match="effects\\(\\) to move when a step runs"):
        endpoints.check_abandon_undoes_each_step(
            Endpoint(
                url="/sound/charges-and-reserves/",
                payload={"amount": 500},
                effects=lambda: 0,
            )
        )


class Standing:
    """A user's suite counting what stands (not collected: no ``Test``
    prefix); ``suites_report()`` runs its compensation case."""

    services = None

    def effects(self):
        return standing(self.services)


def suites_report(suite_class, fakes) -> str:
    suite = suite_class()
    suite.services = fakes
    with pytest.raises(GuaranteeBroken) as caught:
        suite.test_a_unit_given_up_undoes_each_step_once_last_first()
    return str(caught.value)


# Steps consumers.


def order():
    return {"amount": 500}


def test_the_consumer_case_holds_for_keyed_idempotent_undos(fakes):
    consumers.check_abandon_undoes_each_step(
        Consumer(
            sound.charges_and_reserves, "order.placed", order, lambda: standing(fakes)
        )
    )


def test_the_consumer_case_catches_a_missing_undo(fakes):
    consumer = Consumer(
        broken.charges_without_refund, "order.placed", order, lambda: standing(fakes)
    )

    message = report_of(
        consumers.check_abandon_undoes_each_step, consumer, "steps consumer"
    )
    assert "the consumer's steps: charge, reserve; killed right after" in message
    assert "step 'charge' moved effects (charge +1) and has no undo" in message


def test_the_consumer_case_needs_effects_that_the_steps_move(fakes):
    consumer = Consumer(broken.charges_without_refund, "order.placed", order, lambda: 0)
    with pytest.raises(CannotCheck, match="effects\\(\\) to move"):
        consumers.check_abandon_undoes_each_step(consumer)


def test_the_consumer_case_cannot_run_on_a_consumer_without_steps(fakes):
    consumer = Consumer(
        broken.without_inbox, "widget.wanted", {"name": "w"}, widget_count
    )
    with pytest.raises(CannotCheck, match="ran no step"):
        consumers.check_abandon_undoes_each_step(consumer)


class UnkeyedRefundingConsumer(Standing, ConsumerSuite):
    consumer = broken.refunds_unkeyed
    event_type = "order.placed"
    payload = {"amount": 500}


def test_the_consumer_suites_case_catches_an_unkeyed_undo(fakes):
    message = suites_report(UnkeyedRefundingConsumer, fakes)

    assert (
        "the undo of step 'charge' returned, before its recovery point, and the "
        "unit was abandoned again: charge: the effect was undone twice"
    ) in message


# Steps handlers of webhooks.

webhook_case = pytest.mark.usefixtures("source")


def charges_and_reserves(event):
    charge_and_reserve(event, event.data["amount"])


def swaps_its_undos(event):
    charge_and_reserve(
        event,
        event.data["amount"],
        charge_undo=broken.release_the_charged_widget,
        reserve_undo=broken.refund_the_reserved_charge,
    )


@pytest.fixture
def source(settings):
    settings.WEBHOOKS = {"SOURCES": SOURCES}


def paid(fakes, handler) -> Webhook:
    handlers.on(SOURCE, "order.paid", steps=True)(handler)
    return Webhook(
        source=SOURCE,
        event_type="order.paid",
        body=lambda: {"amount": 500, "order": uuid.uuid4().hex},
        effects=lambda: standing(fakes),
    )


@webhook_case
def test_the_webhook_case_holds_for_keyed_idempotent_undos(fakes):
    deliveries.check_webhook_abandon_undoes_each_step(paid(fakes, charges_and_reserves))


@webhook_case
def test_the_webhook_case_catches_undos_out_of_order(fakes):
    webhook = paid(fakes, swaps_its_undos)
    deliveries.check_webhook_crash_after_each_step(webhook)  # the steps hold

    message = report_of(
        deliveries.check_webhook_abandon_undoes_each_step, webhook, "steps handler"
    )
    assert "kit-undos order.paid; its steps: charge, reserve" in message
    assert (
        "the undo of step 'reserve' (run first) undid step 'charge''s effect" in message
    )


@webhook_case
def test_the_webhook_case_cannot_run_on_handlers_without_steps(fakes):
    handlers.on(SOURCE, "order.noted")(lambda event: None)
    webhook = Webhook(SOURCE, "order.noted", dict, lambda: standing(fakes))

    with pytest.raises(CannotCheck, match="steps=True"):
        deliveries.check_webhook_abandon_undoes_each_step(webhook)


# Keyed endpoints as a user's suite, and unittest's style.


class UnkeyedRefunds(Standing, EndpointSuite):
    url = "/broken/unkeyed-refund/"
    payload = {"amount": 500}


def test_the_suites_case_reports_an_unkeyed_undo(fakes):
    assert "undone twice" in suites_report(UnkeyedRefunds, fakes)


@override_settings(ROOT_URLCONF="tests.testing.urls")
class UnittestStyle(TransactionTestCase):
    """The check as a unittest ``TransactionTestCase`` calls it."""

    def setUp(self):
        services = fake_services()
        self.fakes = services.__enter__()
        self.addCleanup(services.__exit__, None, None, None)
        patched = pytest.MonkeyPatch()
        patched.setenv(URL_VARIABLE, self.fakes.url)
        self.addCleanup(patched.undo)

    def test_a_missing_undo_fails_the_test_case(self):
        with self.assertRaisesRegex(GuaranteeBroken, "'charge' .* has no undo"):
            endpoints.check_abandon_undoes_each_step(
                charging("/broken/no-refund/", self.fakes)
            )

    def test_keyed_idempotent_undos_pass(self):
        endpoints.check_abandon_undoes_each_step(
            charging("/sound/charges-and-reserves/", self.fakes)
        )
