import pytest
from django.db import IntegrityError

from webhooks.models import WebhookReceipt

pytestmark = pytest.mark.django_db


def test_one_receipt_per_source_and_delivery(clock):
    fields = {
        "source": "s",
        "delivery_id": "d",
        "body": b"",
        "received_at": clock.now(),
    }
    WebhookReceipt.objects.create(**fields)
    with pytest.raises(IntegrityError):
        WebhookReceipt.objects.create(**fields)


def test_the_console_lists_have_named_indexes():
    names = {index.name for index in WebhookReceipt._meta.indexes}
    assert names == {
        "webhooks_received_src_idx",
        "webhooks_state_received_idx",
        "webhooks_state_source_idx",
        "webhooks_done_idx",
    }
