"""Outbox messages in the console: requeue keeps the message id, repeats safely."""

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.shared import retention
from outbox import relay, tasks
from outbox.models import OutboxMessage
from tests.conftest import run_concurrently

from .conftest import IN_MEMORY

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


def grant_requeue(user):
    grant(user, "requeue_outboxmessage")


def grant(user, codename):
    user.user_permissions.add(Permission.objects.get(codename=codename))


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
    grant_requeue(operator)
    client.force_login(operator)

    answer = requeue(client, dead, failing, published)

    assert "Requeued 2 messages." in answer.content.decode()
    assert "1 was published, already queued or being published" in (
        answer.content.decode()
    )
    assert LogEntry.objects.filter(user=operator).count() == 2
    relay.drain()
    assert {m.id for m in sent} == {str(dead.pk), str(failing.pk)}
    assert OutboxMessage.objects.filter(state="published").count() == 3

    again = requeue(client, dead, failing)  # a double click after the drain
    assert "Requeued 0 messages." in again.content.decode()


def test_a_requeued_message_is_due_for_a_relay_whose_clock_is_a_little_behind(
    client, operator, make_messages, sent, clock
):
    later = clock.now() + timedelta(hours=1)
    (dead,) = make_messages(1, state="dead", attempts=10, last_error="down")
    (failing,) = make_messages(1, attempts=3, last_error="down", available_at=later)
    grant_requeue(operator)
    client.force_login(operator)
    requeue(client, dead, failing)

    clock.advance(seconds=-0.5)  # the kicked relay's host
    relay.drain()

    assert {m.id for m in sent} == {str(dead.pk), str(failing.pk)}


def test_requeue_leaves_a_message_a_relay_holds_right_now(
    client, operator, make_messages
):
    make_messages(1, attempts=3, last_error="down")
    # A relay claims it to publish it: leased, and due only after the lease.
    [claimed] = relay.claim(1)
    grant_requeue(operator)
    client.force_login(operator)

    answer = requeue(client, claimed)

    assert "Requeued 0 messages." in answer.content.decode()
    row = OutboxMessage.objects.get()
    assert (row.attempts, row.locked_until) == (4, claimed.locked_until)


@override_settings(OUTBOX={**IN_MEMORY, "KICK_ON_COMMIT": True})
def test_requeue_kicks_the_relay_which_publishes_at_once(
    client,
    operator,
    make_messages,
    sent,
    eager_celery,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    kicks = []
    real = tasks.relay.apply_async
    monkeypatch.setattr(
        tasks.relay, "apply_async", lambda *a, **kw: kicks.append(1) or real(*a, **kw)
    )
    (dead,) = make_messages(1, state="dead", attempts=20, last_error="down")
    grant_requeue(operator)
    client.force_login(operator)

    with django_capture_on_commit_callbacks(execute=True):
        requeue(client, dead)

    # No drain here: the kick ran the relay task, which published it.
    assert [m.id for m in sent] == [str(dead.pk)]
    assert OutboxMessage.objects.get().state == "published"
    assert kicks == [1]

    with django_capture_on_commit_callbacks(execute=True):
        requeue(client, dead)  # a second click: nothing changed, nothing sent
    assert kicks == [1]
    assert len(sent) == 1


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requeues_change_each_message_once(operator, make_messages):
    later = timezone.now() + timedelta(hours=1)
    (dead,) = make_messages(1, state="dead", attempts=20, last_error="down")
    (failing,) = make_messages(1, attempts=3, last_error="down", available_at=later)
    grant_requeue(operator)

    def submit(_index):
        client = Client()
        client.force_login(operator)
        return requeue(client, dead, failing).content.decode()

    answers = run_concurrently(2, submit)

    # Each message was requeued by one of them (SKIP LOCKED may split them).
    counts = [int(re.search(r"Requeued (\d+) message", a)[1]) for a in answers]
    assert sum(counts) == 2
    logged = LogEntry.objects.values_list("object_id", flat=True)
    assert sorted(logged) == sorted([str(dead.pk), str(failing.pk)])
    dead.refresh_from_db()
    assert (dead.state, dead.requeued_at_attempt) == ("pending", 20)
    failing.refresh_from_db()
    assert failing.available_at < later


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


@pytest.mark.parametrize("may_requeue", [True, False], ids=["operator", "viewer"])
def test_the_oldest_pending_figure_lists_the_oldest_pending_message_first(
    client, operator, make_messages, may_requeue
):
    # The link named its column by position, and the admin counts the
    # action checkbox as one for whoever has an action: it sorted on
    # another column (state, attempts), never on created_at.
    now = timezone.now()
    for age in (5, 60, 30):
        make_messages(1, created_at=now - timedelta(minutes=age), aggregate_id=age)
    grant(operator, "view_opsdashboard")
    if may_requeue:
        grant_requeue(operator)
    client.force_login(operator)
    figures = {
        f.label: f
        for p in client.get("/admin/ops/").context["panels"]
        for f in p.figures
    }

    listed = client.get(figures["oldest pending age"].url).context["cl"].result_list

    assert [m.aggregateid for m in listed] == ["60", "30", "5"]


def test_a_second_submit_of_a_requeue_leaves_a_message_dead_again_since_alone(
    client, operator, make_messages
):
    (message,) = make_messages(1, state="dead", attempts=5)
    grant_requeue(operator)
    client.force_login(operator)
    listed = client.get(CHANGELIST).content.decode()
    seen = re.search(r'name="seen" value="([^"]*)"', listed).group(1)
    data = {"action": "requeue", "_selected_action": [message.pk], "seen": seen}
    client.post(CHANGELIST, data)
    # The relay's five claims of it failed: it is dead again.
    OutboxMessage.objects.filter(pk=message.pk).update(state="dead", attempts=10)

    again = client.post(CHANGELIST, data, follow=True)  # the same page

    text = again.content.decode()
    assert "1 changed since the list was shown" in text
    assert "Requeued 0 messages." in text
    assert OutboxMessage.objects.get(pk=message.pk).state == "dead"
    assert LogEntry.objects.count() == 1


def test_purge_deletes_old_published_messages_and_never_unpublished(make_messages):
    old = timezone.now() - timedelta(days=8)
    make_messages(2, state="published", published_at=old, created_at=old)
    make_messages(1, state="published", published_at=timezone.now())
    make_messages(1, created_at=old)  # pending for 8 days: never deleted
    make_messages(1, state="dead", created_at=old)

    assert retention.purge(only=["outbox"]) == {"outbox": 2}
    assert OutboxMessage.objects.count() == 3
    assert OutboxMessage.objects.filter(state="published").count() == 1


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_requeue_locks_and_writes_where_writes_go(
    client, operator, make_messages, reads_from_a_replica
):
    (dead,) = make_messages(1, state="dead", attempts=10)
    grant_requeue(operator)
    client.force_login(operator)

    assert requeue(client, dead).status_code == 200

    dead.refresh_from_db()
    assert dead.state == "pending"


@override_settings(OUTBOX={**IN_MEMORY, "ORDERED": True})
def test_a_message_a_dead_one_holds_is_listed_and_names_it(
    client, operator, make_messages
):
    # ORDERED: a dead message holds its aggregate until requeued. Its later
    # messages looked merely "pending" and "due now", with nothing saying
    # why no relay ever took them.
    now = timezone.now()
    dead, held = make_messages(2, aggregate_id="order-7")
    OutboxMessage.objects.filter(pk=dead.pk).update(
        state=OutboxMessage.State.DEAD, created_at=now - timedelta(seconds=1)
    )
    (other,) = make_messages(1, aggregate_id="order-8")
    client.force_login(operator)

    listed = client.get(CHANGELIST + "?delivery=held").context["cl"].result_list
    assert [m.pk for m in listed] == [held.pk]
    page = client.get(f"{CHANGELIST}{held.pk}/change/").content.decode()
    assert str(dead.pk) in page
    assert (
        str(dead.pk)
        not in client.get(f"{CHANGELIST}{other.pk}/change/").content.decode()
    )


def test_the_list_and_a_requeue_of_every_row_leave_payloads_unread(
    client, operator, make_messages
):
    # A payload is whatever the application recorded, unbounded: a page read
    # 50 for nothing, and a requeue across the list held every one in memory.
    make_messages(3, state="dead", attempts=10)
    (message,) = make_messages(1)
    grant_requeue(operator)
    client.force_login(operator)

    with CaptureQueriesContext(connection) as listed:
        assert client.get(CHANGELIST).status_code == 200
    with CaptureQueriesContext(connection) as requeued:
        answer = client.post(
            CHANGELIST,
            {"action": "requeue", "select_across": "1", "_selected_action": ["0"]},
            follow=True,
        )
    with CaptureQueriesContext(connection) as shown:
        assert client.get(f"{CHANGELIST}{message.pk}/change/").status_code == 200

    assert "Requeued 3 messages." in answer.content.decode()
    read = [q["sql"] for q in [*listed, *requeued] if '"payload"' in q["sql"]]
    assert read == []
    assert [q for q in shown if '"payload"' in q["sql"]]
