"""The operations dashboard and the purge behind its confirmation page."""

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test import override_settings
from django.test.utils import override_script_prefix
from django.utils import timezone

from idempotency.models import IdempotencyRecord

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/ops/"


@pytest.fixture
def staff(make_user):
    return make_user("operator", is_staff=True)


def grant(user, *codenames):
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))


def make_record(key, *, state="completed", expires_in=timedelta(days=1), lease=None):
    now = timezone.now()
    return IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key=key,
        request_hash="h",
        state=state,
        created_at=now,
        expires_at=now + expires_in,
        locked_until=now + lease if lease else None,
    )


def test_anonymous_is_sent_to_login(client):
    answer = client.get(DASHBOARD)
    assert answer.status_code == 302
    assert "/admin/login/" in answer["Location"]


def test_staff_without_the_permission_gets_403(client, staff):
    client.force_login(staff)
    assert client.get(DASHBOARD).status_code == 403


def test_dashboard_shows_figures_linking_to_filtered_lists(client, staff):
    grant(staff, "view_opsdashboard", "view_idempotencyrecord")
    make_record("pending", state="pending", lease=timedelta(minutes=5))
    make_record("stuck", state="pending", lease=timedelta(minutes=-5))
    make_record("failed", state="failed")
    make_record("old", expires_in=timedelta(seconds=-1))
    client.force_login(staff)

    answer = client.get(DASHBOARD)

    assert answer.status_code == 200
    figures = {f.label: f for p in answer.context["panels"] for f in p.figures}
    assert figures["pending keys"].value == 2
    assert figures["stuck leases"].value == 1
    assert figures["stuck leases"].alert
    assert figures["failed attempts (24 h)"].value == 1
    assert client.get(figures["stuck leases"].url).context["cl"].result_count == 1
    assert {"kind": "idempotency", "count": 1} in answer.context["awaiting_purge"]
    assert b"<svg" in answer.content
    assert b"keys created" in answer.content


def test_admin_index_links_to_the_dashboard(client, staff):
    grant(staff, "view_opsdashboard")
    client.force_login(staff)

    index = client.get("/admin/")
    assert b"/admin/idempotency/opsdashboard/" in index.content
    assert client.get("/admin/idempotency/opsdashboard/")["Location"] == DASHBOARD


def test_purge_needs_its_permission(client, staff):
    grant(staff, "view_opsdashboard")
    make_record("old", expires_in=timedelta(seconds=-1))
    client.force_login(staff)

    assert client.post(DASHBOARD + "purge/", {"confirm": "yes"}).status_code == 403
    assert IdempotencyRecord.objects.count() == 1


def test_purge_confirms_first_then_deletes_and_logs(client, staff):
    grant(staff, "view_opsdashboard", "purge_records")
    make_record("old", expires_in=timedelta(seconds=-1))
    make_record("live")
    client.force_login(staff)

    confirm = client.get(DASHBOARD + "purge/")
    assert confirm.status_code == 200
    assert confirm.context["counts"]["idempotency"] == 1
    assert IdempotencyRecord.objects.count() == 2

    done = client.post(DASHBOARD + "purge/", {"confirm": "yes"}, follow=True)
    assert "Purged 1 record" in done.content.decode()
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["live"]
    assert LogEntry.objects.get().user == staff

    again = client.post(DASHBOARD + "purge/", {"confirm": "yes"}, follow=True)
    assert "Purged 0 records" in again.content.decode()


@pytest.mark.postgresql
def test_a_purge_that_fails_midway_says_and_logs_what_it_deleted(client, staff):
    # An app installed and never migrated: the keys were purged, then the
    # outbox's DELETE failed. A 500 said neither, and logged nothing.
    grant(staff, "view_opsdashboard", "purge_records")
    make_record("old", expires_in=timedelta(seconds=-1))
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE outbox_message RENAME TO outbox_message_away")
    client.force_login(staff)

    # Not followed: the dashboard reads the missing table too.
    done = client.post(DASHBOARD + "purge/", {"confirm": "yes"})

    assert done.status_code == 302
    said = [str(message) for message in get_messages(done.wsgi_request)]
    assert len(said) == 1
    assert "outbox_message" in said[0] and "does not exist" in said[0]
    assert "idempotency: 1" in said[0]
    assert "idempotency: 1" in LogEntry.objects.get().change_message
    assert not IdempotencyRecord.objects.exists()


def test_who_may_purge_but_not_view_the_dashboard_is_never_sent_to_it(client, staff):
    # Its links and its redirect led to the dashboard, a 403 that showed
    # no word of the purge.
    grant(staff, "purge_records")
    make_record("old", expires_in=timedelta(seconds=-1))
    client.force_login(staff)

    confirm = client.get(DASHBOARD + "purge/")
    assert DASHBOARD.encode() not in confirm.content.replace(b"/admin/ops/purge/", b"")

    done = client.post(DASHBOARD + "purge/", {"confirm": "yes"}, follow=True)
    assert done.status_code == 200
    assert "Purged 1 record" in done.content.decode()
    assert not IdempotencyRecord.objects.exists()


def test_counts_past_the_cap_show_as_cap_plus(client, staff, monkeypatch):
    from idempotency.console import panels, views

    monkeypatch.setattr(views, "COUNT_CAP", 3)
    monkeypatch.setattr(panels, "COUNT_CAP", 3)
    grant(staff, "view_opsdashboard")
    for n in range(4):
        make_record(f"old-{n}", expires_in=timedelta(seconds=-1))
    client.force_login(staff)

    answer = client.get(DASHBOARD)

    assert {"kind": "idempotency", "count": "3+"} in answer.context["awaiting_purge"]
    assert "counts above 3 show as 3+" in answer.content.decode()


def test_exactly_the_cap_is_not_cap_plus():
    from idempotency.console.panels import capped, capped_count

    assert capped(10_000) == 10_000
    assert capped(10_001) == "10000+"
    for n in range(3):
        make_record(f"k{n}")
    assert capped_count(IdempotencyRecord.objects.all(), cap=3) == 3
    assert capped_count(IdempotencyRecord.objects.all(), cap=2) == "2+"


def test_a_figure_links_only_where_the_viewer_may_follow(client, staff):
    grant(staff, "view_opsdashboard", "view_idempotencyrecord")
    client.force_login(staff)

    figures = {
        f.label: f for p in client.get(DASHBOARD).context["panels"] for f in p.figures
    }

    assert figures["stuck leases"].url
    # No permission on the outbox's list: the figure shows, unlinked.
    assert figures["dead"].value == 0
    assert figures["dead"].url == ""


@pytest.mark.django_db(transaction=True)
def test_purge_commits_each_batch_under_atomic_requests(client, staff, monkeypatch):
    """ATOMIC_REQUESTS must not wrap the purge in one transaction: its batches
    would hold every deleted row's lock until the request ends."""
    import threading

    from django.db import connection, connections

    from idempotency.shared import clock, retention

    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    grant(staff, "view_opsdashboard", "purge_records")
    now = timezone.now()
    IdempotencyRecord.objects.bulk_create(
        IdempotencyRecord(
            scope="user:1",
            operation="op",
            key=f"old-{n}",
            request_hash="h",
            state="completed",
            created_at=now,
            expires_at=now - timedelta(seconds=1),
        )
        for n in range(retention.DEFAULT_BATCH_SIZE + 1)
    )
    client.force_login(staff)
    seen = []

    def count_from_another_connection(seconds):
        # The rest after a full batch: a writer sees that batch gone.
        def count():
            seen.append(IdempotencyRecord.objects.count())
            connections.close_all()

        thread = threading.Thread(target=count)
        thread.start()
        thread.join()

    monkeypatch.setattr(clock, "sleep", count_from_another_connection)

    client.post(DASHBOARD + "purge/", {"confirm": "yes"})

    assert seen == [1]
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_the_chart_counts_this_hours_keys_in_any_time_zone(client, staff, zone):
    # Half-hour offsets: rows truncated to the local hour (10:00+05:30) never
    # matched the chart's UTC hours (04:00, 05:00), and every count read 0.
    grant(staff, "view_opsdashboard")
    make_record("new")
    client.force_login(staff)

    with override_settings(TIME_ZONE=zone):
        chart = client.get(DASHBOARD).context["chart"]

    keys = next(s for s in chart["series"] if s["label"] == "keys created")
    assert keys["total"] == 1


def test_figures_link_when_the_site_is_served_under_a_path_prefix(client, staff):
    # reverse() puts the prefix (SCRIPT_NAME) in the figure's URL; resolve()
    # wants it out: read as a URL nobody may follow, every link went away.
    grant(staff, "view_opsdashboard", "view_idempotencyrecord")
    client.force_login(staff)

    with override_script_prefix("/ops/"):
        answer = client.get(DASHBOARD)

    figures = {f.label: f for p in answer.context["panels"] for f in p.figures}
    assert figures["stuck leases"].url.startswith("/ops/admin/idempotency/")
    assert figures["dead"].url == ""


@pytest.mark.parametrize("page", ["change", "history"])
def test_the_dashboards_admin_entry_shows_no_record(client, staff, page):
    # Its entry is a proxy of the records, there for a place on the admin
    # index: the permission to view the dashboard is not one to read keys.
    grant(staff, "view_opsdashboard")
    record = make_record("secret-key")
    record.response_headers = {"Set-Cookie": "session=secret"}
    record.save()
    client.force_login(staff)

    answer = client.get(f"/admin/idempotency/opsdashboard/{record.pk}/{page}/")

    assert b"secret" not in answer.content
    assert answer.status_code in (302, 403, 404)


def test_rows_awaiting_purge_link_to_their_filtered_list(client, staff):
    # DESIGN: "rows awaiting purge; each figure links to its filtered list".
    # The counts showed, unlinked: an operator could not see which rows the
    # purge would delete before confirming it.
    grant(staff, "view_opsdashboard", "view_idempotencyrecord")
    make_record("old", expires_in=timedelta(seconds=-1))
    make_record("held", state="pending", expires_in=timedelta(seconds=-1))
    IdempotencyRecord.objects.filter(key="held").update(
        locked_until=timezone.now() + timedelta(minutes=5)
    )
    make_record("live")
    client.force_login(staff)

    answer = client.get(DASHBOARD)

    awaiting = {f.label: f for f in answer.context["purge_figures"]}
    assert awaiting["idempotency"].value == 1
    listed = client.get(awaiting["idempotency"].url)
    assert [r.key for r in listed.context["cl"].result_list] == ["old"]
    assert awaiting["idempotency"].url in answer.content.decode()
    # No permission on the outbox's list: the figure shows, unlinked.
    assert awaiting["outbox"].url == ""


def test_each_lists_past_retention_filter_shows_what_the_purge_deletes(admin_client):
    from django.urls import reverse

    from idempotency.shared import retention
    from inbox.models import InboxMessage
    from outbox.models import OutboxMessage
    from webhooks.models import WebhookReceipt

    old = timezone.now() - timedelta(days=40)
    make_record("old", expires_in=timedelta(seconds=-1))
    make_record("live")
    for state in ("published", "dead"):
        OutboxMessage.objects.create(
            aggregatetype="order",
            aggregateid="1",
            type="created",
            payload={},
            state=state,
            created_at=old,
            available_at=old,
            published_at=old if state == "published" else None,
        )
    for message_id, state in (("applied", "applied"), ("dead", "dead")):
        InboxMessage.objects.create(
            subscriber="s", message_id=message_id, state=state, received_at=old
        )
    for delivery_id, state in (("p", "processed"), ("f", "failed")):
        WebhookReceipt.objects.create(
            source="github",
            delivery_id=delivery_id,
            state=state,
            body=b"{}",
            received_at=old,
            processed_at=old if state == "processed" else None,
        )
    lists = [IdempotencyRecord, OutboxMessage, InboxMessage, WebhookReceipt]

    shown = {}
    for model in lists:
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        page = admin_client.get(url + "?retention=past")
        assert page.status_code == 200
        shown[model] = {row.pk for row in page.context["cl"].result_list}

    assert all(len(pks) == 1 for pks in shown.values())
    assert retention.purge(only=["idempotency", "outbox", "inbox", "webhooks"]) == {
        "idempotency": 1,
        "outbox": 1,
        "inbox": 1,
        "webhooks": 1,
    }
    for model, pks in shown.items():
        assert not model.objects.filter(pk__in=pks).exists()


def test_the_units_list_past_retention_shows_what_the_purge_deletes(admin_client):
    from idempotency.shared import retention
    from idempotency.shared.steps.models import UnitRecord
    from idempotency.shared.units import KEYS, Unit

    old = timezone.now() - timedelta(days=91)
    for key, state in (("done", "done"), ("running", "running")):
        UnitRecord.objects.create(
            id=Unit(KEYS, ("scope", "op", key)).identity,
            kind=KEYS,
            state=state,
            created_at=old,
            updated_at=old,
        )

    page = admin_client.get("/admin/idempotency/unitrecord/?retention=past")

    shown = [unit.pk for unit in page.context["cl"].result_list]
    assert shown == [Unit(KEYS, ("scope", "op", "done")).identity]
    assert retention.purge(only=["units"]) == {"units": 1}
    assert not UnitRecord.objects.filter(pk__in=shown).exists()
