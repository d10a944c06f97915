"""Outbox messages in the console: requeue keeps the message id, repeats safely."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.utils import timezone

from idempotency import retention
from outbox import relay
from outbox.models import OutboxMessage

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/outbox/outboxmessage/"


@pytest.fixture
def operator(make_user):
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_outboxmessage"))
    return user


def requeue(client, *messages):
    return client.post(
        CHANGELIST,
        {"action": "requeue", "_selected_action": [m.pk for m in messages]},
        follow=True,
    )


def test_lists_filters_search_and_detail_render(client, operator, make_messages):
    (message,) = make_messages(1, aggregate_id="order-7")
    client.force_login(operator)

    for query in (
        "?state__exact=pending&delivery=retrying&age=1h",
        "?q=order-7",
        f"?q={message.pk}",
        "?q=not-a-uuid",
    ):
        assert client.get(CHANGELIST + query).status_code == 200
    assert client.get(CHANGELIST + "?q=order-7").context["cl"].result_count == 1
    assert client.get(f"{CHANGELIST}{message.pk}/change/").status_code == 200


def test_requeue_without_its_permission_changes_nothing(
    client, operator, make_messages
):
    (dead,) = make_messages(1, state="dead", attempts=10)
    client.force_login(operator)

    requeue(client, dead)

    dead.refresh_from_db()
    assert dead.state == "dead"
    assert not LogEntry.objects.exists()


def test_requeue_revives_dead_and_hurries_failing_with_the_same_id(
    client, operator, make_messages, sent
):
    later = timezone.now() + timedelta(hours=1)
    (dead,) = make_messages(1, state="dead", attempts=10, last_error="down")
    (failing,) = make_messages(1, attempts=3, last_error="down", available_at=later)
    (published,) = make_messages(1, state="published", published_at=timezone.now())
    operator.user_permissions.add(
        Permission.objects.get(codename="requeue_outboxmessage")
    )
    client.force_login(operator)

    answer = requeue(client, dead, failing, published)

    assert "Requeued 2 messages." in answer.content.decode()
    assert "1 was published or already queued" in answer.content.decode()
    assert LogEntry.objects.filter(user=operator).count() == 2
    relay.drain()
    assert {m.id for m in sent} == {str(dead.pk), str(failing.pk)}
    assert OutboxMessage.objects.filter(state="published").count() == 3

    again = requeue(client, dead, failing)  # a double click after the drain
    assert "Requeued 0 messages." in again.content.decode()


def test_dashboard_shows_backlog_lag_and_dead(client, make_user, make_messages):
    root = make_user("root", is_staff=True, is_superuser=True)
    make_messages(2)
    make_messages(1, state="dead")
    client.force_login(root)

    answer = client.get("/admin/ops/")

    figures = {f.label: f for p in answer.context["panels"] for f in p.figures}
    assert figures["backlog (pending)"].value == 2
    assert figures["dead"].value == 1
    assert figures["dead"].alert
    assert figures["oldest pending age"].value.endswith(" s")
    assert client.get(figures["dead"].url).context["cl"].result_count == 1
    assert b"events published" in answer.content


def test_purge_deletes_old_published_messages_and_never_unpublished(make_messages):
    old = timezone.now() - timedelta(days=8)
    make_messages(2, state="published", published_at=old, created_at=old)
    make_messages(1, state="published", published_at=timezone.now())
    make_messages(1, created_at=old)  # pending for 8 days: never deleted
    make_messages(1, state="dead", created_at=old)

    assert retention.purge(only=["outbox"]) == {"outbox": 2}
    assert OutboxMessage.objects.count() == 3
    assert OutboxMessage.objects.filter(state="published").count() == 1
