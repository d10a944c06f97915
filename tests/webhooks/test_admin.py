"""Receipts in the console: replay and force reprocess, guarded and logged."""

import html
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.shared.steps import Abandon
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.units import WEBHOOKS, Unit
from tests.conftest import given_up_unit, run_concurrently
from tests.signals import listening
from webhooks import processing
from webhooks.admin import FORM_FIELDS_ROOM
from webhooks.models import WebhookReceipt, WebhookRejection

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/webhooks/webhookreceipt/"


@pytest.fixture
def ran(handler_registry):
    """Handler runs per delivery id, for a 'github push'."""
    calls = []

    @handler_registry.on("github", "push")
    def record(event):
        calls.append(event.delivery_id)

    return calls


@pytest.fixture
def operator(make_user):
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_webhookreceipt"))
    return user


def grant(user, codename):
    user.user_permissions.add(Permission.objects.get(codename=codename))


def receipt(delivery_id, state, event_type="push", **extra):
    now = timezone.now()
    return WebhookReceipt.objects.create(
        source="github",
        delivery_id=delivery_id,
        event_type=event_type,
        state=state,
        body=b'{"zen": "ok"}',
        headers={"Content-Type": "application/json"},
        received_at=now,
        processed_at=now if state == "processed" else None,
        **extra,
    )


HIDDEN_INPUT = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def form_fields(page) -> dict:
    """What the form of a confirmation page posts, as a browser would."""
    fields = {}
    for name, value in HIDDEN_INPUT.findall(page.content.decode()):
        fields.setdefault(name, []).append(html.unescape(value))
    return fields


@pytest.fixture
def submit(client, django_capture_on_commit_callbacks):
    """Submit a confirmation page; enqueues on commit run as the request ends."""

    def run(page):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(CHANGELIST, form_fields(page), follow=True)

    return run


@pytest.fixture
def act(client, django_capture_on_commit_callbacks):
    """Run an admin action; enqueues on commit run as the request ends."""

    def run(action, *receipts, **extra):
        data = {"action": action, "_selected_action": [r.pk for r in receipts], **extra}
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(CHANGELIST, data, follow=True)

    return run


def test_list_and_detail_render_for_an_operator(client, operator):
    stored = receipt("d1", "failed", last_error="Traceback: boom")
    client.force_login(operator)

    assert (
        client.get(CHANGELIST + "?state__exact=failed&age=1h&q=d1").status_code == 200
    )
    detail = client.get(f"{CHANGELIST}{stored.pk}/change/")
    assert b"boom" in detail.content
    assert b"once-json" in detail.content


def test_the_list_says_what_each_source_does_with_a_delivery_sent_again(
    client, operator, webhook_sources
):
    webhook_sources.WEBHOOKS["SOURCES"]["standard"]["SECRETS"] = ["whsec_x"]
    client.force_login(operator)

    notes = client.get(CHANGELIST).context["replay_notes"]

    by_source = {note.split(":")[0]: note for note in notes}
    assert set(by_source) == set(webhook_sources.WEBHOOKS["SOURCES"])
    # GitHub signs no time: a captured body runs again once its receipt is gone.
    assert "github: no signed time" in by_source["github"]
    assert "30 days (RETENTION)" in by_source["github"]
    assert "runs its handlers again" in by_source["github"]
    assert "30 days (REPLAY_HORIZON)" in by_source["github"]
    # A steps handler's steps come back from their unit, kept longer.
    assert "for 90 days (UNIT_RETENTION)" in by_source["github"]
    assert "no signed time" in by_source["hmac"]
    assert "more than 5 minutes from its signing is refused" in by_source["stripe"]
    assert "every delivery is refused" in by_source["standard"]
    page = client.get(CHANGELIST).content.decode()
    assert html.escape(by_source["github"]) in page


def test_replay_without_the_permission_changes_nothing(client, operator, ran, act):
    failed = receipt("d1", "failed")
    client.force_login(operator)

    act("replay", failed)

    failed.refresh_from_db()
    assert failed.state == "failed"
    assert ran == []
    assert not LogEntry.objects.exists()


def test_replay_processes_failed_and_received_once_and_skips_processed(
    client, operator, ran, act
):
    failed, waiting, done = (
        receipt("d1", "failed"),
        receipt("d2", "received"),
        receipt("d3", "processed"),
    )
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    answer = act("replay", failed, waiting, done)

    assert sorted(ran) == ["d1", "d2"]
    text = answer.content.decode()
    assert "Replayed 2 receipts." in text
    assert "Skipped 1 receipt already processed or being processed" in text
    assert set(WebhookReceipt.objects.values_list("state", flat=True)) == {"processed"}
    assert LogEntry.objects.filter(user=operator).count() == 2

    act("replay", failed, waiting, done)  # a double click
    assert sorted(ran) == ["d1", "d2"]


def test_a_replayed_receipt_runs_again_with_a_fresh_count_of_runs(
    client, operator, ran, act, webhook_sources
):
    # Its retry's worker died and that message was lost: its deaths used its
    # runs up, but the operator's replay starts them again.
    webhook_sources.WEBHOOKS = {**webhook_sources.WEBHOOKS, "MAX_RETRIES": 2}
    lapsed = timezone.now() - timedelta(minutes=11)
    failed = receipt("d1", "failed", worker_deaths=2, locked_until=lapsed)
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    act("replay", failed)

    assert ran == ["d1"]
    failed.refresh_from_db()
    assert (failed.state, failed.worker_deaths) == ("processed", 0)


def ship(key):
    shipped.append(key)


shipped: list[str] = []


def unship(key, result):
    shipped.append(f"undo {key}")


def unit_given_up(delivery_id, state, **fields):
    return given_up_unit(Unit(WEBHOOKS, ("github", delivery_id)), state, **fields)


@pytest.mark.django_db(transaction=True)  # steps commit on their own
def test_replay_leaves_failed_a_receipt_whose_steps_were_compensated(
    client, operator, handler_registry, act
):
    shipped.clear()

    @handler_registry.on("github", "push", steps=True)
    def push(event):
        event.step("ship", ship)

    gave_up, failed = receipt("d1", "failed"), receipt("d2", "failed")
    # d1's last attempt gave its unit up: a replay would find every step
    # abandoned, mark it processed and apply nothing.
    unit_given_up("d1", "compensated")
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    answer = act("replay", gave_up, failed)

    assert shipped == [Unit(WEBHOOKS, ("github", "d2")).derive("ship")]
    text = answer.content.decode()
    assert "Replayed 1 receipt." in text
    assert "1 failed receipt was left failed: its steps were compensated" in text
    # Said once, with why: not also "skipped, already processed".
    assert "Skipped" not in text
    # A resend keeps the delivery id, so the unit: only a new event helps.
    assert "Only a new event, under a new delivery id, runs the work again." in text
    gave_up.refresh_from_db()
    assert gave_up.state == "failed"


@pytest.mark.django_db(transaction=True)  # steps commit on their own
def test_replay_leaves_alone_a_receipt_a_steps_worker_holds(
    client, operator, handler_registry, django_capture_on_commit_callbacks
):
    shipped.clear()
    answers = []
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    def replay_meanwhile(key):
        # The operator replays it while its worker runs this step, under
        # the receipt's live lease (no row lock: steps commit on their own).
        with django_capture_on_commit_callbacks(execute=True):
            answer = client.post(
                CHANGELIST,
                {"action": "replay", "_selected_action": [stored.pk]},
                follow=True,
            )
        answers.append(answer.content.decode())
        ship(key)

    @handler_registry.on("github", "push", steps=True)
    def push(event):
        event.step("ship", replay_meanwhile)

    stored = receipt("d1", "received")
    processing.process(stored.pk)

    assert "Replayed 0 receipts." in answers[0]
    assert "Skipped 1 receipt already processed or being processed" in answers[0]
    assert not LogEntry.objects.exists()
    assert shipped == [Unit(WEBHOOKS, ("github", "d1")).derive("ship")]
    stored.refresh_from_db()
    assert (stored.state, stored.attempts) == ("processed", 1)


def test_a_second_submit_of_a_replay_leaves_a_receipt_run_again_since_alone(
    client, operator, handler_registry, django_capture_on_commit_callbacks
):
    runs = []

    @handler_registry.on("github", "push")
    def still_failing(event):
        runs.append(event.delivery_id)
        raise RuntimeError("the shop is still down")

    stored = receipt("d1", "failed", attempts=1)
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)
    listed = client.get(CHANGELIST).content.decode()
    seen = re.search(r'name="seen" value="([^"]*)"', listed).group(1)
    data = {"action": "replay", "_selected_action": [stored.pk], "seen": seen}

    with django_capture_on_commit_callbacks(execute=True):
        client.post(CHANGELIST, data)  # reopened, and run again: failed again
    ran = len(runs)
    assert ran >= 1
    with django_capture_on_commit_callbacks(execute=True):
        again = client.post(CHANGELIST, data, follow=True)  # the same page

    assert len(runs) == ran
    text = again.content.decode()
    assert "1 changed since the list was shown" in text
    assert "Replayed 0 receipts." in text
    assert LogEntry.objects.count() == 1


def test_replay_leaves_failed_a_receipt_whose_unit_is_still_compensating(
    client, operator, act
):
    stuck = receipt("d1", "failed")
    # Its unit gave up, but an undo raised: not compensated yet, and its
    # undos finish under Units of work, not by a replay.
    unit_given_up("d1", "compensating", error="ConnectionError: carrier down")
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    answer = act("replay", stuck)

    text = answer.content.decode()
    assert "Replayed 0 receipts." in text
    assert "1 failed receipt was left failed: its unit of work is still" in text
    assert "Abandon that unit again under Units of work" in text
    assert "its steps were compensated" not in text
    stuck.refresh_from_db()
    assert stuck.state == "failed"


@pytest.mark.django_db(transaction=True)  # steps commit on their own
def test_force_reprocess_leaves_alone_a_receipt_whose_steps_are_done_and_says_why(
    client, operator, handler_registry, act, submit
):
    shipped.clear()
    pinged = []

    @handler_registry.on("github", "push", steps=True)
    def push(event):
        event.step("ship", ship, undo=unship)
        if event.delivery_id == "d3":
            raise Abandon("the order was cancelled")  # compensated: undone

    @handler_registry.on("github", "ping")
    def ping(event):
        pinged.append(event.delivery_id)

    stepped, plain, abandoned = (
        receipt("d1", "received"),
        receipt("d2", "received", "ping"),
        receipt("d3", "received"),
    )
    for stored in (stepped, plain, abandoned):
        processing.process(stored.pk)
    assert (len(shipped), pinged) == (3, ["d2"])  # d3: shipped and unshipped
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    confirm = act("force_reprocess", stepped, plain, abandoned)
    # The page promises a run only where one would happen.
    question = confirm.content.decode()
    assert "1 processed receipt will run its handlers again" in question
    assert "2 receipts were left alone: their steps handlers finished" in question
    with listening() as heard:
        answer = submit(confirm).content.decode()

    # Each step would return its recovery point, or stay undone: nothing
    # would have run again, so neither is queued as if something would.
    assert len(shipped) == 3
    assert pinged == ["d2", "d2"]
    assert "Queued 1 receipt for reprocessing." in answer
    assert "Skipped" not in answer
    assert "2 receipts were left alone: their steps handlers finished" in answer
    assert "nothing would run again" in answer
    for left in (stepped, abandoned):
        left.refresh_from_db()
        assert (left.state, left.attempts) == ("processed", 1)
    assert [entry.object_id for entry in LogEntry.objects.all()] == [str(plain.pk)]
    [replayed] = heard.of("delivery_replayed")
    assert replayed["receipt_ids"] == [plain.pk]


def test_force_reprocess_needs_the_stricter_permission(client, operator, ran, act):
    done = receipt("d1", "processed")
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    # The versions the confirmation page would post: only the missing
    # permission can refuse this submit.
    act("force_reprocess", done, post="yes", versions=f"{done.pk}:{done.attempts}")

    done.refresh_from_db()
    assert done.state == "processed"
    assert ran == []


def test_force_reprocess_asks_for_confirmation_first(
    client, operator, ran, act, submit
):
    done = receipt("d1", "processed")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    confirm = act("force_reprocess", done)

    assert confirm.status_code == 200
    assert b"Yes, reprocess" in confirm.content
    done.refresh_from_db()
    assert done.state == "processed"
    assert ran == []

    submit(confirm)
    assert ran == ["d1"]
    done.refresh_from_db()
    assert done.state == "processed"
    assert LogEntry.objects.get().change_message.startswith("Forced reprocessing")


def test_the_confirmation_pages_no_goes_back_as_djangos_own_does(client, operator, act):
    # "No, take me back" is href="#": Django's cancel.js turns it into the
    # browser's back; without the script the link went nowhere.
    done = receipt("d1", "processed")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    confirm = act("force_reprocess", done)

    assert b'class="button cancel-link"' in confirm.content
    assert b"admin/js/cancel.js" in confirm.content


def test_a_skipped_receipt_runs_a_handler_added_since_through_force_reprocess(
    client, operator, ran, act, submit
):
    # Skipped when no handler took its event type; the "push" handler
    # (ran) came with a later deploy.
    skipped = receipt("s1", "skipped")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    submit(act("force_reprocess", skipped))

    assert ran == ["s1"]
    skipped.refresh_from_db()
    assert skipped.state == "processed"


@pytest.mark.parametrize("versions", [None, "", "x:1 ²:² 1: :", "{pk}:7"])
def test_force_reprocess_without_the_pages_versions_reopens_nothing(
    client, operator, ran, act, versions
):
    done = receipt("d1", "processed", attempts=1)
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    extra = {} if versions is None else {"versions": versions.format(pk=done.pk)}

    answer = act("force_reprocess", done, post="yes", **extra)

    assert ran == []
    assert "Skipped 1 receipt not processed" in answer.content.decode()
    assert not LogEntry.objects.exists()


# More digits than int() reads (4,300): parsed, they raised ValueError, a 500.
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("selected", "versions"),
    [
        ("{pk} " + HUGE, "{pk}:{attempts}"),
        ("{pk}", "{pk}:{attempts} " + HUGE + ":1"),
        ("{pk}", "{pk}:{attempts} 1:" + HUGE),
    ],
    ids=["huge-selected", "huge-version-id", "huge-version-attempts"],
)
def test_a_confirmation_page_with_a_number_of_thousands_of_digits_is_answered(
    client, operator, ran, act, selected, versions
):
    done = receipt("d1", "processed")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    fields = {"pk": done.pk, "attempts": done.attempts}

    answer = act(
        "force_reprocess",
        done,
        post="yes",
        select_across="1",
        selected=selected.format(**fields),
        versions=versions.format(**fields),
    )

    # The number is no receipt's: the receipts the page did name run again.
    assert answer.status_code == 200
    assert "Queued 1 receipt for reprocessing." in answer.content.decode()
    assert ran == ["d1"]


def test_a_second_submit_of_the_confirmation_page_changes_nothing(
    client, operator, ran, act, submit
):
    stored = receipt("d1", "received")
    processing.process(stored.pk)
    assert ran == ["d1"]
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    confirm = act("force_reprocess", stored)

    submit(confirm)  # reopened, then processed again (eager worker)
    assert ran == ["d1", "d1"]
    again = submit(confirm)  # the same page: the receipt moved on

    assert ran == ["d1", "d1"]
    assert "Skipped 1 receipt not processed, or changed" in again.content.decode()
    stored.refresh_from_db()
    assert (stored.state, stored.attempts) == ("processed", 2)
    assert LogEntry.objects.count() == 1


def test_force_reprocess_of_more_receipts_than_a_form_may_post_fields(
    client, operator, ran, act, submit, settings
):
    # Django answers 400 to a POST of more than DATA_UPLOAD_MAX_NUMBER_FIELDS
    # fields (1,000 by default): "select all" on a big list must still confirm.
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    done = [receipt(f"d{n}", "processed") for n in range(12)]
    receipt("f1", "failed")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    confirm = act("force_reprocess", done[0], select_across="1")
    assert "12 processed receipts will run" in confirm.content.decode()

    answer = submit(confirm)

    assert answer.status_code == 200
    assert sorted(ran) == sorted(f"d{n}" for n in range(12))
    assert "Queued 12 receipts for reprocessing." in answer.content.decode()
    assert "Skipped 1 receipt" in answer.content.decode()


def test_force_reprocess_of_more_receipts_than_a_form_may_post_says_so_first(
    client, operator, ran, act, submit, settings
):
    # Django answers 400 to a form body over DATA_UPLOAD_MAX_MEMORY_SIZE
    # (2.5 MB by default, some 140,000 receipts' ids and versions): the page
    # asked to confirm, and its "yes" failed with a bare 400.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    done = [receipt(f"d{n}", "processed") for n in range(150)]
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    answer = act("force_reprocess", done[0], select_across="1")

    text = answer.content.decode()
    assert "Yes, reprocess" not in text
    assert "150 receipts are more than one confirmation page can carry" in text
    assert ran == []
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None  # no limit: the page confirms
    confirm = act("force_reprocess", done[0], select_across="1")
    assert "150 processed receipts will run" in confirm.content.decode()


def post_concurrently(user, fields) -> list[str]:
    """Post ``fields`` to the list from two threads at once, as ``user``; return
    the pages they answer."""

    def post(_index):
        client = Client()
        client.force_login(user)
        return client.post(CHANGELIST, fields, follow=True).content.decode()

    return run_concurrently(2, post)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_submits_of_the_confirmation_page_reopen_once(
    client, operator, ran
):
    stored = receipt("d1", "received")
    processing.process(stored.pk)
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    confirm = client.post(
        CHANGELIST, {"action": "force_reprocess", "_selected_action": [stored.pk]}
    )

    answers = post_concurrently(operator, form_fields(confirm))

    assert ran == ["d1", "d1"]  # processed, then forced once
    assert sorted("Queued 1 receipt" in a for a in answers) == [False, True]
    assert LogEntry.objects.count() == 1
    stored.refresh_from_db()
    assert (stored.state, stored.attempts) == ("processed", 2)


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_replays_run_a_failed_receipt_once(operator, ran):
    stored = receipt("d1", "failed", attempts=1)
    grant(operator, "replay_webhookreceipt")

    answers = post_concurrently(
        operator, {"action": "replay", "_selected_action": [stored.pk]}
    )

    assert ran == ["d1"]
    assert any("Replayed 1 receipt." in a for a in answers)
    stored.refresh_from_db()
    assert (stored.state, stored.attempts) == ("processed", 2)


def test_rejections_list_renders(client, operator):
    WebhookRejection.objects.count_one(
        source="github", reason="bad-signature", now=timezone.now()
    )
    operator.user_permissions.add(
        Permission.objects.get(codename="view_webhookrejection")
    )
    client.force_login(operator)

    assert client.get("/admin/webhooks/webhookrejection/").status_code == 200


def test_the_reason_filter_offers_and_finds_replayed_bodies(client, operator):
    for reason in ("replayed-body", "bad-signature"):
        WebhookRejection.objects.count_one(
            source="github", reason=reason, now=timezone.now()
        )
    grant(operator, "view_webhookrejection")
    client.force_login(operator)

    listed = client.get(
        "/admin/webhooks/webhookrejection/", {"reason__exact": "replayed-body"}
    )

    [reasons] = [
        spec for spec in listed.context["cl"].filter_specs if spec.title == "reason"
    ]
    assert ("replayed-body", "replayed-body") in reasons.lookup_choices
    assert [r.reason for r in listed.context["cl"].result_list] == ["replayed-body"]


def test_dashboard_shows_receipts_by_source_and_state_and_rejections(client, make_user):
    admin_user = make_user("root", is_staff=True, is_superuser=True)
    receipt("d1", "failed"), receipt("d2", "processed")
    WebhookRejection.objects.count_one(
        source="github", reason="bad-signature", now=timezone.now()
    )
    client.force_login(admin_user)

    answer = client.get("/admin/ops/")

    figures = {f.label: f for p in answer.context["panels"] for f in p.figures}
    assert figures["github · failed"].value == 1
    assert figures["github · failed"].alert
    assert figures["github · processed"].value == 1
    assert figures["rejected github · bad-signature"].value == 1
    listed = client.get(figures["github · failed"].url)
    assert listed.context["cl"].result_count == 1
    assert b"receipts received" in answer.content


def test_a_rejections_figure_links_to_the_days_it_counts(client, make_user):
    # The figure counts the last day's rejections; its list showed every
    # day kept (30 by default), so it disagreed with the figure it explains.
    admin_user = make_user("root", is_staff=True, is_superuser=True)
    now = timezone.now()
    for when in (now - timedelta(days=5), now):
        WebhookRejection.objects.count_one(
            source="github", reason="bad-signature", now=when
        )
    client.force_login(admin_user)

    answer = client.get("/admin/ops/")

    figures = {f.label: f for p in answer.context["panels"] for f in p.figures}
    figure = figures["rejected github · bad-signature"]
    assert figure.value == 1
    listed = client.get(figure.url).context["cl"]
    assert [row.day for row in listed.result_list] == [now.date()]


def test_purge_keeps_unprocessed_receipts_whatever_their_age(clock):
    old = timezone.now() - timedelta(days=40)
    for delivery_id, state in [
        ("p", "processed"),
        ("s", "skipped"),
        ("r", "received"),
        ("f", "failed"),
    ]:
        WebhookReceipt.objects.create(
            source="github",
            delivery_id=delivery_id,
            state=state,
            body=b"{}",
            received_at=old,
            processed_at=old if state in ("processed", "skipped") else None,
        )
    receipt("fresh", "processed")
    WebhookRejection.objects.count_one(source="github", reason="bad-signature", now=old)

    from idempotency.shared import retention

    assert retention.purge(only=["webhooks"]) == {"webhooks": 3}
    assert set(WebhookReceipt.objects.values_list("delivery_id", flat=True)) == {
        "r",
        "f",
        "fresh",
    }
    assert not WebhookRejection.objects.exists()


def test_the_units_purge_keeps_the_unit_of_a_receipt_kept_whatever_its_age():
    # Received and failed receipts stay until processed (a replay, the
    # provider's resend): purged, their given-up unit would let that run do
    # its steps again, the compensated ones too.
    old = timezone.now() - timedelta(days=91)  # past UNIT_RETENTION
    for delivery_id, state in [("r", "received"), ("f", "failed"), ("p", "processed")]:
        receipt(delivery_id, state)
        unit_given_up(delivery_id, "compensated")
    UnitRecord.objects.update(updated_at=old)

    from idempotency.shared import retention

    assert retention.purge(only=["units"]) == {"units": 1}
    assert set(UnitRecord.objects.values_list("pk", flat=True)) == {
        Unit(WEBHOOKS, ("github", delivery_id)).identity for delivery_id in "rf"
    }


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_replay_locks_and_writes_where_writes_go(
    client, operator, reads_from_a_replica
):
    failed = receipt("d1", "failed")
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    answer = client.post(
        CHANGELIST, {"action": "replay", "_selected_action": [failed.pk]}, follow=True
    )

    assert answer.status_code == 200
    failed.refresh_from_db()
    assert failed.state != "failed"


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_replay_reads_the_receipts_units_where_writes_go(
    client, operator, act, reads_from_a_replica
):
    gave_up = receipt("d1", "failed")
    grant(operator, "replay_webhookreceipt")
    client.force_login(operator)

    with transaction.atomic():
        # Its last attempt gave its unit up on the primary; the replica has
        # not caught up yet.
        unit_given_up("d1", "compensated")
        answer = act("replay", gave_up)

    assert "1 failed receipt was left failed" in answer.content.decode()
    assert WebhookReceipt.objects.using("default").get(pk=gave_up.pk).state == "failed"


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_force_reprocess_reads_the_receipts_units_where_writes_go(
    client, operator, handler_registry, act, submit, reads_from_a_replica
):
    @handler_registry.on("github", "push", steps=True)
    def push(event):
        event.step("ship", ship)

    done = receipt("d1", "processed")
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)

    with transaction.atomic():
        # Its steps finished their unit on the primary; the replica has not
        # caught up yet.
        unit_given_up("d1", "done")
        answer = submit(act("force_reprocess", done))

    assert "1 receipt was left alone" in answer.content.decode()
    left = WebhookReceipt.objects.using("default").get(pk=done.pk)
    assert (left.state, left.attempts) == ("processed", 0)


def test_a_selection_too_big_to_confirm_is_refused_before_its_ids_are_read(
    client, operator, settings
):
    # Each id takes two bytes of the form at least: past that, the selection
    # cannot fit. Every id of a select-all over millions of receipts was
    # read, and their versions written out, only to be refused.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = FORM_FIELDS_ROOM + 20
    done = [receipt(f"d{n}", "processed") for n in range(30)]
    grant(operator, "reprocess_webhookreceipt")
    client.force_login(operator)
    data = {
        "action": "force_reprocess",
        "_selected_action": [done[0].pk],
        "select_across": "1",
    }

    with CaptureQueriesContext(connection) as queries:
        assert client.post(CHANGELIST, data).status_code == 302
    ids_read = [
        q["sql"]
        for q in queries
        if '"webhooks_webhookreceipt"."id"' in q["sql"].split(" FROM ")[0]
    ]

    assert ids_read
    assert all(" LIMIT 11" in sql for sql in ids_read), ids_read
    assert "30 receipts are more than one confirmation page can carry" in (
        client.get(CHANGELIST).content.decode()
    )


def test_each_awaiting_purge_figure_links_to_the_rows_it_counts(client, make_user):
    # The webhooks kind purges receipts and rejection counts: its one figure
    # counted both and linked to the receipts alone.
    admin_user = make_user("root", is_staff=True, is_superuser=True)
    old = timezone.now() - timedelta(days=40)
    WebhookReceipt.objects.create(
        source="github",
        delivery_id="p",
        state="processed",
        body=b"{}",
        received_at=old,
        processed_at=old,
    )
    for reason in ("bad-signature", "replayed-body"):
        WebhookRejection.objects.count_one(source="github", reason=reason, now=old)
    client.force_login(admin_user)

    figures = client.get("/admin/ops/").context["purge_figures"]

    webhooks = [f for f in figures if f.label.startswith("webhooks")]
    assert sorted(f.value for f in webhooks) == [1, 2]
    for figure in webhooks:
        assert client.get(figure.url).context["cl"].result_count == figure.value
