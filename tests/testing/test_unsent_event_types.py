"""A handler registered for an event type the provider never sends (a typo
in ``@on()``) waits for nothing: the webhook kit's cases cannot run on the
type the provider does send, and say which types have handlers."""

import pytest
from django.test import TransactionTestCase

from idempotency.shared.testing.guarantees import CannotCheck
from tests.testing import broken
from tests.testing.helpers import widget_count
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks.testing import deliveries
from webhooks.testing.deliveries import Webhook

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("handler_registry"),
]


def misspelt_registration() -> Webhook:
    # Stripe sends "invoice.payment_succeeded".
    broken.register("stripe", "invoice.payment_succeded", broken.mail_the_team)
    return Webhook("stripe", "invoice.payment_succeeded", dict, widget_count)


@pytest.mark.parametrize("check", deliveries.WEBHOOK_CHECKS, ids=lambda c: c.__name__)
def test_a_misspelt_event_type_is_shown_beside_the_one_sent(check):
    with pytest.raises(CannotCheck) as caught:
        check(misspelt_registration())

    said = str(caught.value)
    assert "@on('stripe', 'invoice.payment_succeeded')? None is" in said
    assert "'invoice.payment_succeded', 'payment_intent" in said
    assert "misspelt, or not the type the provider sends?" in said


@pytest.mark.usefixtures("handler_registry")
class UnittestStyle(TransactionTestCase):
    def test_a_misspelt_event_type_is_shown(self):
        with self.assertRaisesRegex(CannotCheck, "'invoice.payment_succeded'"):
            deliveries.check_webhook_redelivery(misspelt_registration())
