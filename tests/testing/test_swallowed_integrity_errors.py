"""Code that takes a database error for a duplicate (``except IntegrityError``
around its work, as teams write to dedupe by hand) swallows a real failure:
the work rolls back to its savepoint and the request, message or receipt is
done with nothing done. The kit's failure must reach that ``except`` as a
real one would, and each suite's failure case say so."""

import pytest
from django.db import IntegrityError

from idempotency.shared.testing.crashes import InjectedFailure
from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from inbox.testing import consumers
from tests.testing import broken
from tests.testing.helpers import broken_message, new_widget, widget_count
from tests.testing.test_failed_deliveries import reserving
from tests.testing.test_webhook_handlers import payments
from tests.webhooks.conftest import handler_registry  # noqa: F401 (a fixture)
from webhooks.testing import deliveries

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_kits_failure_is_a_database_error_as_a_real_one_is():
    assert issubclass(InjectedFailure, IntegrityError)


@pytest.mark.urls("tests.testing.urls")
def test_a_view_swallowing_integrity_errors_is_reported():
    endpoint = Endpoint(
        url="/broken/swallows-integrity-error/",
        payload=new_widget,
        effects=widget_count,
    )

    message = broken_message(endpoints.check_failed_attempt, endpoint)

    assert message.startswith(
        "Guarantee broken: a failure after the view's own writes is never stored "
        "as a success"
    )
    assert "the view answered 200 although it failed" in message
    assert "it caught the failure and answered a success" in message
    assert "an except IntegrityError taking it for a duplicate" in message
    assert "the retry got the failed attempt's answer, replayed" in message


def test_a_consumer_swallowing_integrity_errors_is_reported():
    message = broken_message(
        consumers.check_failed_delivery,
        reserving(broken.reserves_swallowing_integrity_errors),
    )

    assert message.startswith(f"Guarantee broken: {consumers.FAILED_DELIVERY}")
    assert "returned instead of raising, so the message is acked" in message
    assert "reserved: the effect was lost" in message


@pytest.mark.usefixtures("handler_registry")
def test_a_handler_swallowing_integrity_errors_is_reported():
    webhook = payments(broken.pays_swallowing_integrity_errors, "kit.paid-integrity")

    message = broken_message(deliveries.check_webhook_failure, webhook)

    assert message.startswith(f"Guarantee broken: {deliveries.FAILED_WEBHOOK}")
    assert "returned instead of raising, so the receipt is marked processed" in message
    assert "paid: the effect was lost" in message
