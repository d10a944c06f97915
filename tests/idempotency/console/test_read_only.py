"""DESIGN: "A ModelAdmin per record: read-only". Even a superuser, who holds
every permission, can add, change or delete no record through the console:
its actions are its only writes."""

import pytest
from django.contrib import admin
from django.urls import reverse

from idempotency.console.admin import ReadOnlyAdmin
from idempotency.models import IdempotencyRecord
from idempotency.shared.steps.models import UnitRecord
from inbox.models import InboxMessage
from outbox.models import OutboxMessage
from webhooks.models import WebhookReceipt, WebhookRejection

pytestmark = pytest.mark.django_db

RECORDS = [
    IdempotencyRecord,
    UnitRecord,
    OutboxMessage,
    InboxMessage,
    WebhookReceipt,
    WebhookRejection,
]


def _url(model, view, *args):
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


@pytest.mark.parametrize("model", RECORDS, ids=lambda m: m.__name__)
def test_every_record_has_a_read_only_admin(model):
    assert isinstance(admin.site._registry[model], ReadOnlyAdmin)


@pytest.mark.parametrize("model", RECORDS, ids=lambda m: m.__name__)
def test_a_superuser_may_add_or_delete_nothing(admin_client, model):
    assert admin_client.get(_url(model, "add")).status_code == 403
    answer = admin_client.get(_url(model, "changelist"))
    assert answer.status_code == 200
    form = answer.context["action_form"]  # None: a list with no action
    actions = [name for name, _label in form.fields["action"].choices] if form else []
    assert "delete_selected" not in actions


def test_a_superusers_post_to_a_records_page_changes_and_deletes_nothing(
    admin_client,
):
    from django.utils import timezone

    now = timezone.now()
    record = IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key="k",
        request_hash="h",
        state="completed",
        created_at=now,
        expires_at=now,
    )

    changed = admin_client.post(
        _url(IdempotencyRecord, "change", record.pk),
        {"key": "other", "state": "failed", "scope": "user:2"},
    )
    deleted = admin_client.post(
        _url(IdempotencyRecord, "delete", record.pk), {"post": "yes"}
    )
    bulk = admin_client.post(
        _url(IdempotencyRecord, "changelist"),
        {"action": "delete_selected", "_selected_action": [record.pk], "post": "yes"},
    )

    assert changed.status_code == 403
    assert deleted.status_code == 403
    assert bulk.status_code in (200, 302)
    record.refresh_from_db()
    assert (record.key, record.state, record.scope) == ("k", "completed", "user:1")
