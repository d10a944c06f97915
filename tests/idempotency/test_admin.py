"""The idempotency records in the console: read-only, one guarded action."""

import contextlib
import logging
import threading
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.shared.units import KEYS, Unit
from tests.conftest import run_concurrently
from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value
from tests.signals import listening

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/idempotency/idempotencyrecord/"


@pytest.fixture
def staff(make_user):
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="view_idempotencyrecord"),
        Permission.objects.get(codename="view_opsdashboard"),
    )
    return user


def grant(user, codename):
    user.user_permissions.add(Permission.objects.get(codename=codename))


def make_record(key, *, state="pending", lease=-60):
    now = timezone.now()
    return IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key=key,
        request_hash="h",
        state=state,
        created_at=now,
        expires_at=now + timedelta(days=1),
        locked_until=now + timedelta(seconds=lease) if state == "pending" else None,
        response_body=b'{"id": 1}',
        response_headers={"Content-Type": "application/json"},
    )


def release(client, *records):
    return client.post(
        CHANGELIST,
        {"action": "release_stuck_keys", "_selected_action": [r.pk for r in records]},
        follow=True,
    )


def test_anonymous_is_sent_to_the_login_page(client):
    answer = client.get(CHANGELIST)

    assert answer.status_code == 302
    assert "/admin/login/" in answer["Location"]


def test_list_detail_and_filters_render_read_only(client, staff):
    record = make_record("k1", state="completed")
    client.force_login(staff)

    listing = client.get(
        CHANGELIST + "?state__exact=completed&lease=stuck&age=1h&scope=user:1&q=k1"
    )
    assert listing.status_code == 200
    detail = client.get(f"{CHANGELIST}{record.pk}/change/")
    assert detail.status_code == 200
    assert b"once-json" in detail.content
    assert client.get(CHANGELIST + "add/").status_code == 403


def test_the_list_leaves_stored_bodies_unread(client, staff):
    # Up to MAX_STORED_BODY (1 MiB) each: 50 a page were read for nothing.
    record = make_record("k1", state="completed")
    client.force_login(staff)

    with CaptureQueriesContext(connection) as listed:
        assert client.get(CHANGELIST).status_code == 200
    with CaptureQueriesContext(connection) as shown:
        assert client.get(f"{CHANGELIST}{record.pk}/change/").status_code == 200

    assert not [q for q in listed if "response_body" in q["sql"]]
    assert [q for q in shown if "response_body" in q["sql"]]


def test_a_body_nested_too_deep_for_json_shows_as_text(client, staff):
    # A view may answer any bytes: JSON nested past what json.loads parses
    # must not take the record's page down.
    record = make_record("deep", state="completed")
    body = b"[" * 100_000 + b"]" * 100_000
    IdempotencyRecord.objects.filter(pk=record.pk).update(response_body=body)
    client.force_login(staff)

    detail = client.get(f"{CHANGELIST}{record.pk}/change/")

    assert detail.status_code == 200
    assert b"[[[[" in detail.content


@pytest.mark.parametrize(
    ("lease", "listed"),
    [("stuck", ["stuck"]), ("live", ["held"]), ("other", ["done", "held", "stuck"])],
)
def test_the_lease_filter_lists_stuck_or_held_keys(client, staff, lease, listed):
    make_record("stuck")
    make_record("held", lease=600)
    make_record("done", state="completed")
    client.force_login(staff)

    page = client.get(CHANGELIST + f"?lease={lease}")

    assert sorted(r.key for r in page.context["cl"].result_list) == listed
    assert "stuck (lease expired)" in page.text and "held" in page.text


def test_search_finds_a_key_exactly(client, staff):
    make_record("needle", state="completed")
    make_record("needles", state="completed")
    client.force_login(staff)

    answer = client.get(CHANGELIST + "?q=needle")
    assert answer.context["cl"].result_count == 1


def test_release_without_its_permission_changes_nothing(client, staff):
    stuck = make_record("stuck")
    client.force_login(staff)

    answer = release(client, stuck)

    assert answer.status_code == 200
    stuck.refresh_from_db()
    assert stuck.state == "pending"
    assert not LogEntry.objects.exists()


def test_a_release_from_the_stuck_list_counts_what_was_selected(client, staff):
    # The dashboard's figure links to ?lease=stuck: the action's rows are that
    # list's, which no longer holds the keys it has just released.
    stuck = [make_record("stuck-1"), make_record("stuck-2")]
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)

    answer = client.post(
        CHANGELIST + "?lease=stuck",
        {"action": "release_stuck_keys", "_selected_action": [r.pk for r in stuck]},
        follow=True,
    )

    said = [str(m) for m in answer.context["messages"]]
    assert said == ["Released 2 stuck keys."]


def test_release_marks_expired_leases_failed_logs_and_is_safe_twice(client, staff):
    stuck, live = make_record("stuck"), make_record("live", lease=600)
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)

    first = release(client, stuck, live)
    stuck.refresh_from_db()
    live.refresh_from_db()
    assert (stuck.state, stuck.locked_until) == ("failed", None)
    assert live.state == "pending"
    assert "Released 1 stuck key." in first.content.decode()
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id) == (staff, str(stuck.pk))

    second = release(client, stuck)
    assert "Released 0 stuck keys." in second.content.decode()
    assert LogEntry.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # sent after the release commits
@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_release_is_sent_logged_and_counted_with_the_operator_never_the_key(
    client, staff, caplog
):
    stuck = make_record("stuck-key-1234")
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)
    before = released_count(scrape(client))
    caplog.set_level(logging.INFO, logger="idempotency")

    with listening() as heard:
        release(client, stuck)
        release(client, stuck)  # a second click releases nothing

    [released] = heard.of("keys_released")
    unit = Unit(KEYS, ("user:1", "op", "stuck-key-1234")).identity
    assert released == {
        "count": 1,
        "user": staff,
        "released": [{"operation": "op", "scope": "user:1", "unit": unit}],
    }
    [logged] = [r for r in caplog.records if r.name == "idempotency"]
    assert logged.levelname == "INFO"
    assert {name: getattr(logged, name) for name in released} == released
    assert released_count(scrape(client)) - before == 1
    assert "stuck-key-1234" not in client.get("/metrics").content.decode()


def released_count(scraped) -> float:
    return value(
        scraped,
        "once_keys_total",
        operation="op",
        mode="",
        outcome="released",
        reason="",
    )


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_releases_of_a_stuck_key_release_and_log_it_once(staff):
    stuck = make_record("stuck")
    grant(staff, "release_idempotencyrecord")
    # Each submit waits, once it has read the key, for the other to read it
    # too (or for a second to pass): the window a concurrent submit uses.
    both_read = threading.Barrier(2, timeout=1)
    waited = threading.local()

    def read(sender, instance, **kwargs):
        if getattr(waited, "done", False):
            return
        waited.done = True
        with contextlib.suppress(threading.BrokenBarrierError):
            both_read.wait()

    post_init.connect(read, sender=IdempotencyRecord)
    try:

        def submit(_index):
            operator = Client()
            operator.force_login(staff)
            return release(operator, stuck).status_code

        assert run_concurrently(2, submit) == [200, 200]
    finally:
        post_init.disconnect(read, sender=IdempotencyRecord)

    assert LogEntry.objects.count() == 1
    stuck.refresh_from_db()
    assert stuck.state == "failed"


def test_a_released_key_lets_the_clients_retry_run(api, clock, client, staff):
    from tests.testapp import views

    views.faults["crash"] = 1
    with pytest.raises(views.SimulatedCrash):
        api.post("/t/charge/", {}, key="k")
    record = IdempotencyRecord.objects.get()
    IdempotencyRecord.objects.update(locked_until=timezone.now() - timedelta(seconds=1))
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)
    release(client, record)

    assert api.post("/t/charge/", {}, key="k").status_code == 201


def test_date_hierarchy_lists_periods_between_first_and_last_row(client, staff):
    now = timezone.now()
    for days_ago in (0, 40, 400):
        record = make_record(f"k{days_ago}", state="completed")
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            created_at=now - timedelta(days=days_ago)
        )
    client.force_login(staff)

    from idempotency.templatetags.once_admin import once_date_hierarchy

    years = client.get(CHANGELIST).context["cl"]
    choices = [c["title"] for c in once_date_hierarchy(years)["choices"]]
    first_year = (now - timedelta(days=400)).year
    assert choices == [str(year) for year in range(first_year, now.year + 1)]
    month = client.get(
        CHANGELIST, {"created_at__year": now.year, "created_at__month": now.month}
    )
    assert month.status_code == 200
    assert month.context["cl"].result_count >= 1


def test_lists_count_at_most_the_cap(client, staff, monkeypatch):
    from idempotency.console.admin import CappedPaginator

    monkeypatch.setattr(CappedPaginator, "CAP", 3)
    for i in range(5):
        make_record(f"k{i}", state="completed")
    client.force_login(staff)

    assert client.get(CHANGELIST).context["cl"].result_count == 3


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_release_locks_and_writes_where_writes_go(
    client, staff, reads_from_a_replica
):
    # The list reads from the replica; the action's transaction, its row
    # locks and its update belong on the database writes go to.
    stuck = make_record("stuck")
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)

    assert release(client, stuck).status_code == 200

    stuck.refresh_from_db()
    assert stuck.state == "failed"


def test_a_list_past_the_cap_says_select_all_changes_more_than_its_count(
    client, staff, monkeypatch
):
    # The list counts 3 and offers "Select all 3 idempotency records"; an
    # action across it changes all 5: an operator must not take the cap for
    # the rows a release (an abandon, a replay) will change.
    from idempotency.console.admin import CappedPaginator

    monkeypatch.setattr(CappedPaginator, "CAP", 3)
    for i in range(3):
        make_record(f"k{i}")
    grant(staff, "release_idempotencyrecord")
    client.force_login(staff)
    assert "More than 3" not in client.get(CHANGELIST).content.decode()
    for i in range(3, 5):
        make_record(f"k{i}")

    page = client.get(CHANGELIST).content.decode()

    assert "More than 3 idempotency records match" in page
    answer = client.post(
        CHANGELIST,
        {
            "action": "release_stuck_keys",
            "select_across": "1",
            "_selected_action": ["0"],
        },
        follow=True,
    )
    assert "Released 5 stuck keys." in answer.content.decode()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_release_under_atomic_requests_leaves_a_key_taken_since_its_snapshot(
    staff, isolation_level, monkeypatch
):
    # Under ATOMIC_REQUESTS the request's snapshot is taken at its first
    # query (the session). A client's retry that takes the stuck key over
    # after it, before the release locks the key, is a serialization failure
    # under REPEATABLE READ: the release answered 500. docs/reliability.md:
    # REPEATABLE READ has no such failures of its own.
    from idempotency.console import admin as console

    stuck = make_record("stuck")
    grant(staff, "release_idempotencyrecord")
    lock_unchanged = console.lock_unchanged

    def after_a_retry_took_it(*args, **kwargs):
        def retry():
            IdempotencyRecord.objects.filter(pk=stuck.pk).update(
                locked_until=timezone.now() + timedelta(minutes=5), attempts=2
            )

        run_concurrently(1, lambda _index: retry())
        return lock_unchanged(*args, **kwargs)

    monkeypatch.setattr(console, "lock_unchanged", after_a_retry_took_it)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    client = Client()
    client.force_login(staff)

    answer = release(client, stuck)

    assert answer.status_code == 200
    assert "Released 0 stuck keys." in answer.text
    stuck.refresh_from_db()
    assert (stuck.state, stuck.attempts) == ("pending", 2)
    assert not LogEntry.objects.exists()
