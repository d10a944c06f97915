"""A purge never forgets an inbox id a broker could still redeliver."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test.utils import override_settings
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared import retention
from inbox.api import receive
from inbox.models import InboxMessage

pytestmark = pytest.mark.django_db

# An hour of memory against the default seven-day redelivery horizon.
FORGETFUL = override_settings(INBOX={"RETENTION": timedelta(hours=1)})


@pytest.fixture
def old_rows():
    """An inbox id received two hours ago and an expired idempotency key."""
    with receive("shop.reserve_stock", "m-1"):
        pass
    InboxMessage.objects.update(received_at=timezone.now() - timedelta(hours=2))
    IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key="old",
        request_hash="h",
        state="completed",
        created_at=timezone.now() - timedelta(days=2),
        expires_at=timezone.now() - timedelta(seconds=1),
    )


@FORGETFUL
def test_a_purge_refuses_a_retention_shorter_than_the_horizon_and_deletes_nothing(
    old_rows,
):
    with pytest.raises(ImproperlyConfigured, match="REDELIVERY_HORIZON"):
        retention.purge()

    # Not even the kinds before the inbox: the refusal comes first.
    assert IdempotencyRecord.objects.count() == 1
    # The id is still remembered, so the late redelivery is a duplicate.
    assert InboxMessage.objects.count() == 1


@FORGETFUL
def test_the_command_says_why_it_refused(old_rows):
    with pytest.raises(CommandError, match=r"INBOX\['RETENTION'\] \(3600 s\)"):
        call_command("purge_idempotency")


@FORGETFUL
def test_the_console_says_why_instead_of_counting_or_purging(old_rows, admin_client):
    dashboard = admin_client.get("/admin/ops/")
    assert dashboard.status_code == 200
    assert "shorter than REDELIVERY_HORIZON (604800 s)" in dashboard.content.decode()

    purged = admin_client.post("/admin/ops/purge/", {"confirm": "yes"}, follow=True)
    assert "shorter than REDELIVERY_HORIZON (604800 s)" in purged.content.decode()
    assert InboxMessage.objects.count() == 1


@override_settings(
    INBOX={"RETENTION": timedelta(hours=1), "REDELIVERY_HORIZON": timedelta(hours=1)}
)
def test_a_retention_that_outlasts_a_declared_horizon_purges(old_rows):
    assert retention.purge()["inbox"] == 1
