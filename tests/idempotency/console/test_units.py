"""Units of work in the console: step logs, stuck units, release and abandon."""

import logging
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from idempotency.shared.steps import CompensationFailed, StepTakenOver, begin
from idempotency.shared.steps.models import StepRecord, UnitRecord
from idempotency.shared.units import INBOX, KEYS, Unit
from outbox.api import record
from outbox.models import OutboxMessage
from tests.idempotency.prometheus.scraping import METRICS_ON, scrape, value
from tests.signals import listening

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/idempotency/unitrecord/"
LEASE = timedelta(seconds=30)
refunds: list[tuple[str, object]] = []


def refund(key, result):
    refunds.append((key, result))


@pytest.fixture(autouse=True)
def _reset_refunds():
    refunds.clear()


@pytest.fixture
def staff(make_user):
    user = make_user("operator", is_staff=True)
    grant(user, "view_unitrecord", "view_opsdashboard")
    return user


def grant(user, *codenames):
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))


def unit_with_steps(name, *, kind=KEYS):
    unit = Unit(kind, ("user:1", "payment.create", name))
    steps = begin(unit, f"payment.create {name}", lease=LEASE)
    steps.step("charge", lambda key: {"charge": "ch_" + "x" * 100}, undo=refund)
    steps.step("mail", lambda key: None)
    return UnitRecord.objects.get(pk=unit.identity)


def lapse(*units):
    UnitRecord.objects.filter(pk__in=[u.pk for u in units]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def act(client, action, *units):
    return client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [u.pk for u in units]},
        follow=True,
    )


def test_a_units_page_lists_its_steps_with_a_short_result(client, staff):
    unit = unit_with_steps("k1")
    client.force_login(staff)

    page = client.get(f"{CHANGELIST}{unit.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "charge" in text and "mail" in text
    assert '{"charge": "ch_xxx' in text.replace("&quot;", '"')
    assert "…" in text  # the long result is cut short
    assert client.get(CHANGELIST + "add/").status_code == 403


def test_the_stuck_filter_and_the_dashboard_count_lapsed_units(client, staff):
    stuck, live = unit_with_steps("stuck"), unit_with_steps("live", kind=INBOX)
    lapse(stuck)
    client.force_login(staff)

    listing = client.get(CHANGELIST + "?lease=stuck")
    assert [u.pk for u in listing.context["cl"].result_list] == [stuck.pk]
    by_kind = client.get(CHANGELIST + "?kind=inbox")
    assert [u.pk for u in by_kind.context["cl"].result_list] == [live.pk]

    dashboard = client.get("/admin/ops/")
    (units_panel,) = [
        p for p in dashboard.context["panels"] if p.title == "Units of work (steps)"
    ]
    stuck_figure = units_panel.figures[1]
    assert (stuck_figure.value, stuck_figure.alert) == (1, True)
    assert stuck_figure.url == CHANGELIST + "?lease=stuck"


def test_release_needs_its_permission(client, staff):
    unit = unit_with_steps("k1")
    lapse(unit)
    client.force_login(staff)

    act(client, "release_units", unit)

    assert UnitRecord.objects.get().attempt == 1
    assert not LogEntry.objects.exists()


def test_release_clears_a_lapsed_lease_fences_the_old_worker_and_is_safe_twice(
    client, staff
):
    stuck, live = unit_with_steps("stuck"), unit_with_steps("live")
    lapse(stuck)
    grant(staff, "release_unitrecord")
    client.force_login(staff)

    first = act(client, "release_units", stuck, live)

    stuck.refresh_from_db()
    assert (stuck.attempt, stuck.lease_expires_at) == (2, None)
    assert UnitRecord.objects.get(pk=live.pk).attempt == 1
    assert "Released 1 unit." in first.content.decode()
    assert LogEntry.objects.get().object_id == stuck.pk
    second = act(client, "release_units", stuck)
    assert "Released 0 units." in second.content.decode()
    assert LogEntry.objects.count() == 1
    assert client.get(CHANGELIST + "?lease=released").context["cl"].result_count == 1


@override_settings(IDEMPOTENCY=METRICS_ON)
def test_a_release_is_sent_logged_and_counted_once_with_the_operator(
    client, staff, caplog
):
    stuck = unit_with_steps("stuck")
    lapse(stuck)
    grant(staff, "release_unitrecord")
    client.force_login(staff)
    before = scrape(client)
    caplog.set_level(logging.INFO, logger="idempotency")

    with listening() as heard:
        act(client, "release_units", stuck)
        act(client, "release_units", stuck)  # a second click releases nothing

    [released] = heard.of("units_released")
    assert released == {
        "count": 1,
        "user": staff,
        "units": [{"kind": KEYS, "unit": stuck.pk}],
    }
    [logged] = [r for r in caplog.records if r.name == "idempotency"]
    assert logged.levelname == "INFO"
    assert {name: getattr(logged, name) for name in released} == released
    counted = "once_units_released_total"
    after = scrape(client)
    assert value(after, counted, kind=KEYS) - value(before, counted, kind=KEYS) == 1


def refund_and_record(key, result):
    with transaction.atomic():
        record("payment", 1, "payment.refunded", {"key": key})


def test_an_abandons_undos_record_their_events_under_the_units_intent(client, staff):
    unit = Unit(INBOX, ("shipping", "m1"), inherited_intent="a" * 64)
    steps = begin(unit, "shipping m1", lease=LEASE)
    steps.step("charge", lambda key: "ch_1", undo=refund_and_record)
    lapse(UnitRecord.objects.get())
    grant(staff, "abandon_unitrecord")
    client.force_login(staff)

    act(client, "abandon_units", UnitRecord.objects.get())

    # Run in the console's request, with no unit current, the refund still
    # names the intent the unit served.
    event = OutboxMessage.objects.get()
    assert event.headers["once-intent"] == "a" * 64
    assert event.payload == {"key": unit.derive("undo:charge")}


def test_a_released_units_old_worker_cannot_give_it_up(client, staff):
    unit = Unit(KEYS, ("user:1", "payment.create", "hung"))
    old = begin(unit, "payment.create hung", lease=LEASE)
    old.step("charge", lambda key: {"charge": "ch_1"}, undo=refund)
    lapse(UnitRecord.objects.get())
    grant(staff, "release_unitrecord")
    client.force_login(staff)
    act(client, "release_units", UnitRecord.objects.get())

    # The hung worker wakes and gives up: the operator released the unit for
    # its next retry to resume, so the fenced-out worker writes nothing.
    with pytest.raises(StepTakenOver):
        old.give_up("declined")

    assert refunds == []
    row = UnitRecord.objects.get()
    assert (row.state, row.attempt) == ("running", 2)
    assert begin(unit, "payment.create hung", lease=LEASE).done("charge")


def test_abandon_needs_its_permission(client, staff):
    unit = unit_with_steps("k1")
    lapse(unit)
    grant(staff, "release_unitrecord")
    client.force_login(staff)

    act(client, "abandon_units", unit)

    assert UnitRecord.objects.get().state == "running"
    assert refunds == []


def failing_refund(key, result):
    refunds.append((key, result))
    raise ConnectionError("provider down")


def test_an_abandon_whose_undo_fails_midway_is_logged_with_the_operator(client, staff):
    unit = Unit(KEYS, ("user:1", "payment.create", "partial"))
    steps = begin(unit, "payment.create partial", lease=LEASE)
    steps.step("charge", lambda key: "ch_1", undo=failing_refund)
    steps.step("book", lambda key: "bk_1", undo=refund)
    row = UnitRecord.objects.get()
    lapse(row)
    grant(staff, "abandon_unitrecord")
    client.force_login(staff)

    answer = act(client, "abandon_units", row)

    # The booking was cancelled by this click before the refund failed.
    assert [result for _key, result in refunds] == ["bk_1", "ch_1"]
    assert "provider down" in answer.content.decode()
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id) == (staff, row.pk)
    assert "provider down" in entry.change_message


def test_abandon_compensates_a_stuck_unit_once_logs_and_is_safe_twice(client, staff):
    stuck, live = unit_with_steps("stuck"), unit_with_steps("live")
    lapse(stuck)
    grant(staff, "abandon_unitrecord")
    client.force_login(staff)

    first = act(client, "abandon_units", stuck, live)
    second = act(client, "abandon_units", stuck)

    stuck.refresh_from_db()
    assert stuck.state == "compensated"
    # The client's retry reads it: no staff name (the admin log has it).
    assert stuck.reason == "Abandoned by an operator in the console."
    assert LogEntry.objects.get().user == staff
    assert len(refunds) == 1
    assert UnitRecord.objects.get(pk=live.pk).state == "running"  # its lease is live
    text = first.content.decode()
    assert "Abandoned and compensated 1 unit." in text
    assert "is running and its lease is live" in text
    assert "Abandoned and compensated 0 units." in second.content.decode()
    assert LogEntry.objects.count() == 1
    assert dict(StepRecord.objects.filter(unit=stuck).values_list("name", "state")) == {
        "charge": "undone",
        "mail": "done",
        "undo:charge": "done",
    }


def test_an_abandon_from_a_page_shown_before_a_release_leaves_the_unit_alone(
    client, staff
):
    # The page showed the unit stuck; another operator released it since for
    # the client's retry to resume. This stale submit must not undo its steps
    # under that retry.
    stuck = unit_with_steps("stuck")
    lapse(stuck)
    grant(staff, "abandon_unitrecord", "release_unitrecord")
    client.force_login(staff)
    listed = client.get(CHANGELIST).content.decode()
    seen = re.search(r'name="seen" value="([^"]*)"', listed).group(1)
    act(client, "release_units", stuck)

    data = {"action": "abandon_units", "_selected_action": [stuck.pk], "seen": seen}
    answer = client.post(CHANGELIST, data, follow=True)

    text = answer.content.decode()
    assert "1 changed since the list was shown" in text
    assert "Abandoned and compensated 0 units." in text
    stuck.refresh_from_db()
    assert (stuck.state, stuck.attempt, stuck.lease_expires_at) == ("running", 2, None)
    assert refunds == []


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("action", "permission", "left"),
    [
        (
            "release_units",
            "release_unitrecord",
            {"attempt": 2, "lease_expires_at": None},
        ),
        ("abandon_units", "abandon_unitrecord", {"state": "compensated"}),
    ],
)
def test_an_action_locks_and_writes_where_writes_go(
    client, staff, reads_from_a_replica, action, permission, left
):
    # The list reads from the replica; the action's transaction, its row
    # locks and its writes belong on the database writes go to.
    stuck = unit_with_steps("stuck")
    lapse(stuck)
    grant(staff, permission)
    client.force_login(staff)

    assert act(client, action, stuck).status_code == 200

    stuck.refresh_from_db()
    assert {field: getattr(stuck, field) for field in left} == left


def test_a_compensation_whose_undo_raised_counts_as_stuck(client, staff):
    # Its undo raised: the unit stays compensating, its lease cleared so the
    # next abandon continues. Nothing retries it by itself: the operator's
    # filter, figure and alert must show it.
    unit = Unit(KEYS, ("user:1", "payment.create", "failed-undo"))
    steps = begin(unit, "payment.create failed-undo", lease=LEASE)
    steps.step("charge", lambda key: {"charge": "ch_1"}, undo=failing_refund)
    with pytest.raises(CompensationFailed):
        steps.give_up("declined")
    assert UnitRecord.objects.get().state == "compensating"
    client.force_login(staff)

    listing = client.get(CHANGELIST + "?lease=stuck")
    assert [u.pk for u in listing.context["cl"].result_list] == [unit.identity]
    dashboard = client.get("/admin/ops/")
    (units_panel,) = [
        p for p in dashboard.context["panels"] if p.title == "Units of work (steps)"
    ]
    assert units_panel.figures[1].value == 1
