"""Inbox messages in the console and their retention."""

import logging
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.shared import retention
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.units import INBOX, Unit
from inbox.models import InboxMessage
from tests.conftest import given_up_unit
from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value
from tests.signals import listening

pytestmark = pytest.mark.django_db


def message(message_id, *, duplicates=0, age=timedelta(0), subscriber="shop"):
    return InboxMessage.objects.create(
        subscriber=subscriber,
        message_id=message_id,
        duplicates=duplicates,
        received_at=timezone.now() - age,
    )


def test_list_filters_and_search_render(client, make_user):
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_inboxmessage"))
    message("m1", duplicates=2)
    message("m2")
    client.force_login(user)

    url = "/admin/inbox/inboxmessage/"
    assert client.get(url + "?duplicates=yes").context["cl"].result_count == 1
    assert client.get(url + "?q=m2&subscriber=shop&age=1h").status_code == 200
    assert client.get(url + "add/").status_code == 403


def test_dashboard_counts_duplicates_dropped(client, make_user):
    root = make_user("root", is_staff=True, is_superuser=True)
    message("m1", duplicates=2)
    message("m2", duplicates=1)
    message("m3")
    client.force_login(root)

    figures = {
        f.label: f
        for p in client.get("/admin/ops/").context["panels"]
        for f in p.figures
    }
    assert figures["duplicates dropped"].value == 3
    assert figures["messages redelivered"].value == 2
    assert figures["dead messages"].value == 0


def test_purge_deletes_rows_past_the_inbox_retention_only():
    message("old", age=timedelta(days=31))
    message("recent", age=timedelta(days=29))

    assert retention.purge(only=["inbox"]) == {"inbox": 1}
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["recent"]


def test_purge_keeps_dead_messages_whatever_their_age():
    message("old", age=timedelta(days=31))
    InboxMessage.objects.filter(message_id="old").update(state="dead")

    assert retention.purge(only=["inbox"]) == {"inbox": 0}
    assert InboxMessage.objects.dead().count() == 1


def test_purge_keeps_running_steps_deliveries_whatever_their_age():
    message("old", age=timedelta(days=31))
    InboxMessage.objects.filter(message_id="old").update(state="running")

    assert retention.purge(only=["inbox"]) == {"inbox": 0}
    assert InboxMessage.objects.running().count() == 1


def test_the_units_purge_keeps_the_unit_of_a_message_kept_whatever_its_age():
    # Dead and running rows stay until a run applies them (a replay, a
    # redelivery): purged, their given-up unit would let that run do its
    # steps again, the compensated ones too.
    old = timezone.now() - timedelta(days=91)  # past UNIT_RETENTION
    for message_id, state in [("dead", "dead"), ("running", "running"), ("ok", "")]:
        message(message_id)
        if state:
            InboxMessage.objects.filter(message_id=message_id).update(state=state)
        given_up_unit(Unit(INBOX, ("shop", message_id)), "compensated")
    UnitRecord.objects.update(updated_at=old)

    assert retention.purge(only=["units"]) == {"units": 1}
    assert set(UnitRecord.objects.values_list("pk", flat=True)) == {
        Unit(INBOX, ("shop", message_id)).identity for message_id in ("dead", "running")
    }


def test_dead_messages_are_counted_listed_and_replay_needs_its_permission(
    client, make_user
):
    message("m1")
    message("m2").__class__.objects.filter(message_id="m2").update(
        state="dead", attempts=5, last_error="RuntimeError('boom')"
    )
    operator = make_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_inboxmessage"))
    client.force_login(operator)

    url = "/admin/inbox/inboxmessage/"
    listed = client.get(url + "?state__exact=dead")
    assert listed.context["cl"].result_count == 1
    assert b'value="replay"' not in listed.content  # needs replay_inboxmessage
    row = InboxMessage.objects.get(message_id="m2")
    assert "boom" in client.get(f"{url}{row.pk}/change/").content.decode()


@pytest.fixture
def replay(client, make_user):
    """``replay(pk)``: an operator who may replay sends the console's action."""
    operator = make_user("operator", is_staff=True)
    for codename in ("view_inboxmessage", "replay_inboxmessage"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(operator)

    def send(pk):
        return client.post(
            "/admin/inbox/inboxmessage/",
            {"action": "replay", "_selected_action": [pk]},
            follow=True,
        )

    return send


def dead(message_id, task="inbox_tests.flaky"):
    """A dead message whose task the console can send again."""
    row = message(message_id)
    redrive = {"task": task, "id": message_id, "args": [], "kwargs": {}}
    InboxMessage.objects.filter(pk=row.pk).update(
        state="dead",
        attempts=5,
        redrive={**redrive, "headers": {}, "queue": "inbox-tests-replayed"},
    )
    return row


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_an_operators_replay_is_sent_logged_and_counted_with_the_operator(
    replay, caplog, client
):
    before = replayed_count(scrape(client))
    row = dead("m1")
    caplog.set_level(logging.INFO, logger="inbox")

    with listening() as heard:
        replay(row.pk)

    [replayed] = heard.of("messages_replayed")
    assert replayed["count"] == 1
    assert replayed["user"].username == "operator"
    assert replayed["messages"] == [{"subscriber": "shop", "message_id": "m1"}]
    # Logged once, its extra the signal's arguments.
    [logged] = [r for r in caplog.records if r.name == "inbox"]
    assert logged.levelname == "INFO"
    assert {name: getattr(logged, name) for name in replayed} == replayed
    # Counted by subscriber, never by message id.
    assert replayed_count(scrape(client)) - before == 1
    assert "m1" not in client.get("/metrics").content.decode()


def replayed_count(scraped) -> float:
    return value(
        scraped, "once_inbox_messages_total", subscriber="shop", outcome="replayed"
    )


def test_a_replay_that_sends_nothing_sends_no_signal(replay):
    row = message("m1")  # applied, not dead: nothing to replay

    with listening() as heard:
        replay(row.pk)

    assert heard.of("messages_replayed") == []


def test_a_replay_while_the_broker_is_down_says_so_and_keeps_the_message_dead(
    replay, monkeypatch
):
    # send_task raised through the admin action: a 500 page, no word of
    # what was sent.
    from inbox import ops

    redrive = {
        "task": "inbox_tests.flaky",
        "id": "t-1",
        "args": [],
        "kwargs": {},
        "headers": {},
        "queue": "celery",
    }
    message("m1").__class__.objects.filter(message_id="m1").update(
        state="dead", attempts=5, last_error="RuntimeError()", redrive=redrive
    )

    def broker_down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(ops.current_app, "send_task", broker_down)

    answer = replay(InboxMessage.objects.get().pk)

    assert answer.status_code == 200
    assert "Could not replay" in answer.content.decode()
    assert "broker down" in answer.content.decode()
    assert InboxMessage.objects.get().state == "dead"


def test_a_replay_of_many_dead_messages_reads_their_units_per_batch(
    client, make_user, django_assert_max_num_queries
):
    # One query per message took a select-all of 20,000 dead messages past
    # a request's time limit.
    now = timezone.now()
    InboxMessage.objects.bulk_create(
        InboxMessage(
            subscriber="shop",
            message_id=f"m{n}",
            received_at=now,
            state="dead",
            redrive={
                "task": "inbox_tests.flaky",
                "id": f"m{n}",
                "args": [],
                "kwargs": {},
                "headers": {},
                "queue": "inbox-tests-replayed",
            },
        )
        for n in range(600)
    )
    operator = make_user("operator", is_staff=True)
    for codename in ("view_inboxmessage", "replay_inboxmessage"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(operator)

    with django_assert_max_num_queries(40):
        answer = client.post(
            "/admin/inbox/inboxmessage/",
            {"action": "replay", "select_across": "1", "_selected_action": ["0"]},
        )

    assert answer.status_code == 302
    assert LogEntry.objects.count() == 600


def test_a_replay_stopped_by_the_broker_logs_and_counts_those_it_sent(
    replay, client, monkeypatch
):
    from inbox import ops

    sent = []

    def broker_fails_on_the_third(*args, **kwargs):
        if len(sent) == 2:
            raise ConnectionError("broker down")
        sent.append(kwargs["task_id"])

    monkeypatch.setattr(ops.current_app, "send_task", broker_fails_on_the_third)
    rows = [dead(f"m{n}") for n in range(4)]

    answer = client.post(
        "/admin/inbox/inboxmessage/",
        {"action": "replay", "_selected_action": [row.pk for row in rows]},
        follow=True,
    ).content.decode()

    assert "Replayed 2 messages." in answer
    assert "Could not replay the others, which stay dead: broker down" in answer
    assert sorted(int(e.object_id) for e in LogEntry.objects.all()) == sorted(
        row.pk for row in rows if row.message_id in sent
    )


def given_up(message_id, state, **fields):
    """A dead message whose last attempt gave its unit up (``state``)."""
    row = message(message_id)
    InboxMessage.objects.filter(pk=row.pk).update(
        state="dead",
        redrive={"task": "t", "id": message_id, "args": [], "kwargs": {}},
    )
    given_up_unit(Unit(INBOX, ("shop", message_id)), state, **fields)
    return row


def test_replay_leaves_a_message_whose_steps_were_compensated_dead_and_says_so(
    replay,
):
    # Its last attempt gave its unit up: a replay would apply nothing.
    row = given_up("m3", "compensated")

    response = replay(row.pk)

    said = [str(m) for m in response.context["messages"]]
    assert said[0] == "Replayed 0 messages."
    assert said[1].startswith("1 was left dead")
    # Resent under the same id, it would be the same given-up unit.
    assert "as a new message if its steps were compensated" in said[1]
    assert InboxMessage.objects.get(pk=row.pk).state == "dead"


def test_replay_leaves_a_message_whose_unit_is_still_compensating_dead_and_says_how(
    replay,
):
    # Its unit gave up, but an undo failed: it is not compensated yet, and
    # the undos finish under Units of work, not by a replay.
    row = given_up("m4", "compensating", error="ConnectionError: provider down")

    response = replay(row.pk)

    said = [str(m) for m in response.context["messages"]]
    assert said[0] == "Replayed 0 messages."
    assert said[1].startswith("1 was left dead: its unit of work is still compensating")
    assert "Abandon that unit again under Units of work" in said[1]
    assert not any("were compensated" in line for line in said)
    assert len(said) == 2
    assert InboxMessage.objects.get(pk=row.pk).state == "dead"


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_replay_reads_the_messages_and_their_units_where_writes_go(
    replay, monkeypatch, reads_from_a_replica
):
    # The list reads from the replica; what the replay sends is decided on
    # the database writes go to, which a replica may be behind.
    from inbox import ops

    sent = []
    monkeypatch.setattr(ops.current_app, "send_task", lambda *a, **kw: sent.append(a))
    gave_up, applied = dead("m1"), dead("m2")

    with transaction.atomic():
        # On the primary, m1's last attempt gave its unit up and a
        # redelivery applied m2; the replica has not caught up yet.
        given_up_unit(Unit(INBOX, ("shop", "m1")), "compensated")
        InboxMessage.objects.filter(pk=applied.pk).update(state="applied")
        for row in (gave_up, applied):
            replay(row.pk)

    assert sent == []


IDS_READ = re.compile(r'"inbox_message"\."id" IN \(([^)]*)\)')


def test_the_list_and_a_replay_of_every_row_read_arguments_a_batch_at_a_time(
    replay, client, monkeypatch
):
    # A redrive holds the producer's payload, unbounded: a page read 50 for
    # nothing, and a replay across the list held every one in memory at once.
    monkeypatch.setattr("inbox.admin.REPLAY_BATCH", 2)
    monkeypatch.setattr("inbox.ops.current_app.send_task", lambda *a, **k: None)
    rows = [dead(f"m{n}") for n in range(5)]

    with CaptureQueriesContext(connection) as listed:
        assert client.get("/admin/inbox/inboxmessage/").status_code == 200
    with CaptureQueriesContext(connection) as replayed:
        answer = client.post(
            "/admin/inbox/inboxmessage/",
            {"action": "replay", "select_across": "1", "_selected_action": ["0"]},
            follow=True,
        )
    with CaptureQueriesContext(connection) as shown:
        page = client.get(f"/admin/inbox/inboxmessage/{rows[0].pk}/change/")

    assert "Replayed 5 messages." in answer.content.decode()
    assert not [q for q in listed if '"redrive"' in q["sql"]]
    reads = [q["sql"] for q in replayed if 'inbox_message"."redrive"' in q["sql"]]
    batches = [IDS_READ.search(sql) for sql in reads]
    assert all(batches), reads
    assert sorted(len(ids.group(1).split(",")) for ids in batches) == [1, 2, 2]
    assert "inbox-tests-replayed" in page.content.decode()
    assert [q for q in shown if '"redrive"' in q["sql"]]
