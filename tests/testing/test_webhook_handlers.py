"""The webhook kit's cases on handlers' own mistakes: a handler whose work
fails must raise, so its receipt is retried (one that swallows the failure
has the receipt marked processed and the event lost); a handler must
tolerate the second run of a forced reprocess (one mailing on every run is
reported)."""

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import TransactionTestCase

from idempotency.shared.testing.guarantees import GuaranteeBroken
from tests.testapp.models import Order, Widget
from tests.testing import broken
from tests.testing.helpers import broken_message
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook
from webhooks.testing.suites import WebhookSuite

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("handler_registry"),
]
SOURCE = "stripe"


def an_order():
    owner, _ = get_user_model().objects.get_or_create(username="payer")
    order = Order.objects.create(owner=owner, sku="BOOK-1", quantity=1)
    return {"order": order.pk}


def effects():
    return {
        "paid": Order.objects.filter(status="paid").count(),
        "notes": Widget.objects.count(),
        "mails": len(mail.outbox),
    }


def pay(event):
    order = Order.objects.select_for_update().get(pk=event.data["order"])
    if order.status == "paid":
        return  # a second run: done already
    order.status = "paid"
    order.save(update_fields=["status"])
    Widget.objects.create(name=f"paid {order.pk}")


def payments(handler, event_type) -> Webhook:
    broken.register(SOURCE, event_type, handler)
    return Webhook(SOURCE, event_type, an_order, effects)


CASES = [deliveries.check_webhook_failure, deliveries.check_webhook_forced_reprocess]


@pytest.mark.parametrize("check", CASES, ids=lambda check: check.__name__)
def test_the_cases_hold_for_a_handler_that_raises_and_tolerates_a_rerun(check):
    check(payments(pay, "kit.paid"))


@pytest.mark.parametrize(
    ("check", "handler", "guarantee", "said"),
    [
        (
            deliveries.check_webhook_failure,
            broken.pays_swallowing_failures,
            deliveries.FAILED_WEBHOOK,
            [
                "returned instead of raising, so the receipt is marked processed",
                "paid: the effect was lost",
                "notes: the effect was lost",
            ],
        ),
        (
            deliveries.check_webhook_forced_reprocess,
            broken.pays_and_mails_every_run,
            deliveries.FORCED_WEBHOOK,
            [
                "processed, then force-reprocessed",
                "'mails': 2",
                "apply the event only where the state it sets is not there yet",
            ],
        ),
    ],
    ids=["swallows-its-failure", "mails-on-every-run"],
)
def test_a_handlers_mistake_is_reported(check, handler, guarantee, said):
    message = broken_message(check, payments(handler, "kit.paid-broken"))

    assert message.startswith(f"Guarantee broken: {guarantee}")
    for words in said:
        assert words in message


def test_a_handler_working_on_commit_is_reported_with_its_own_failure():
    webhook = payments(broken.pays_once_committed, "kit.paid-on-commit")

    failed = broken_message(deliveries.check_webhook_failure, webhook)
    died = broken_message(deliveries.check_webhook_crash, webhook)

    # The handler's own exception, not the kit's wrapper of it.
    assert "it raised InjectedFailure, then the task was retried" in failed
    assert "CannotCheck" not in failed
    assert "notes: the effect was lost" in failed
    assert died.startswith(f"Guarantee broken: {deliveries.CRASHED_WEBHOOK}")
    assert "paid: the effect was lost" in died


class PaymentSuite(WebhookSuite):  # run by hand below, not collected
    source = SOURCE
    event_type = "kit.paid-broken"

    def body(self):
        return an_order()

    def effects(self):
        return effects()


def test_the_suite_reports_a_swallowed_failure():
    broken.register(SOURCE, "kit.paid-broken", broken.pays_swallowing_failures)

    with pytest.raises(GuaranteeBroken, match="marks it processed and loses it"):
        PaymentSuite().test_a_failed_handler_is_retried_and_applied_once()


def test_the_suite_reports_a_handler_mailing_on_every_run():
    broken.register(SOURCE, "kit.paid-broken", broken.pays_and_mails_every_run)

    with pytest.raises(GuaranteeBroken, match="tolerate the second run"):
        PaymentSuite().test_a_forced_reprocess_makes_no_effect_twice()


@pytest.mark.usefixtures("handler_registry")
class UnittestStyle(TransactionTestCase):
    """The check as a unittest ``TransactionTestCase`` calls it."""

    def test_a_swallowed_failure_fails_the_test_case(self):
        webhook = payments(broken.pays_swallowing_failures, "kit.paid-swallowed")
        with self.assertRaisesRegex(GuaranteeBroken, "returned instead of raising"):
            deliveries.check_webhook_failure(webhook)

    def test_a_handler_mailing_on_every_run_fails_the_test_case(self):
        webhook = payments(broken.pays_and_mails_every_run, "kit.paid-twice")
        with self.assertRaisesRegex(GuaranteeBroken, "force-reprocessed"):
            deliveries.check_webhook_forced_reprocess(webhook)
