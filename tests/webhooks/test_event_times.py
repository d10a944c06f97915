"""Event times a provider chooses: refused at intake when a receipt could not
keep them; a stored row that cannot be read fails alone, in the drain and the
console."""

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone as django_timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.webhooks import signing
from webhooks import processing
from webhooks.conf import verifier_class
from webhooks.handlers import on
from webhooks.models import WebhookReceipt
from webhooks.verifiers.base import (
    EARLIEST_EVENT_TIME,
    LATEST_EVENT_TIME,
    MALFORMED_BODY,
    VERIFIER_ERROR,
    BaseVerifier,
    Delivery,
    VerificationFailed,
)

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"
# The deliveries: stored, they read back as year 0 or 10000 in UTC.
YEAR_ZERO = "0001-01-01T00:00:00+01:00"
YEAR_10000 = "9999-12-31T23:59:59-01:00"
# Python's datetime takes offsets below 24 hours, PostgreSQL below 16.
FAR_OFFSET = "2026-01-01T00:00:00+16:00"
# Unix seconds of 0001-01-01 and 9999-12-31T23:59:59 in UTC.
FIRST_SECOND = -62135596800
LAST_SECOND = 253402300799


def standard_body(timestamp, delivery_id="evt_1"):
    event = {"type": "thing.happened", "timestamp": timestamp, "data": {}}
    return json.dumps(event).encode()


def post_standard(timestamp, delivery_id="evt_1"):
    body = standard_body(timestamp, delivery_id)
    headers = signing.standard_headers(body, msg_id=delivery_id)
    return Client().post(
        "/webhooks/standard/", body, content_type="application/json", headers=headers
    )


def post_stripe(created, delivery_id="evt_1"):
    body = json.dumps({"id": delivery_id, "type": "thing", "created": created})
    headers = signing.stripe_headers(body.encode())
    return Client().post(
        "/webhooks/stripe/", body, content_type="application/json", headers=headers
    )


def refused(response):
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == PROBLEM
    assert json.loads(response.content)["type"].endswith("/webhook-malformed-body")
    assert not WebhookReceipt.objects.exists()


# Intake.


@pytest.mark.parametrize(
    "timestamp",
    [
        YEAR_ZERO,
        YEAR_10000,
        FAR_OFFSET,
        "2026-01-01T00:00:00+14:01",
        "2026-01-01T00:00:00-14:01",
        "0001-01-01T00:00:00",
        "not a time",
        "",
        1_700_000_000,
        ["2026-01-01T00:00:00Z"],
    ],
)
def test_a_standard_event_time_a_receipt_cannot_keep_is_400_and_stores_nothing(
    timestamp,
):
    refused(post_standard(timestamp))


@pytest.mark.parametrize(
    "created", [FIRST_SECOND, LAST_SECOND, 10**20, -(10**20), "1700000000", 1.5, True]
)
def test_a_stripe_created_a_receipt_cannot_keep_is_400_and_stores_nothing(created):
    refused(post_stripe(created))


@pytest.mark.parametrize(
    ("timestamp", "stored"),
    [
        ("2026-01-01T00:00:00+14:00", datetime(2025, 12, 31, 10, tzinfo=UTC)),
        ("2026-01-01T00:00:00-14:00", datetime(2026, 1, 1, 14, tzinfo=UTC)),
        ("0001-01-02T00:00:00+00:00", EARLIEST_EVENT_TIME),
        ("9999-12-30T23:59:59.999999Z", LATEST_EVENT_TIME),
        ("2026-01-01T00:00:00", datetime(2026, 1, 1, tzinfo=UTC)),
        (None, None),
    ],
)
def test_event_times_a_receipt_can_keep_are_stored_and_read_back(timestamp, stored):
    assert post_standard(timestamp).status_code == 202
    assert WebhookReceipt.objects.get().occurred_at == stored


# Django keeps naive datetimes in TIME_ZONE then, and SQLite refuses an aware
# one: every timed delivery answered 500, and the console's list too.
WITHOUT_USE_TZ = override_settings(USE_TZ=False, TIME_ZONE="America/New_York")


@WITHOUT_USE_TZ
def test_without_use_tz_an_event_time_is_kept_in_the_projects_time_zone():
    assert post_standard("2026-01-01T12:00:00Z").status_code == 202
    assert post_stripe(1767268800, "evt_2").status_code == 202  # the same time

    stored = WebhookReceipt.objects.order_by("pk").values_list("occurred_at", flat=True)
    assert list(stored) == [datetime(2026, 1, 1, 7)] * 2


def test_a_refused_event_time_leaves_the_source_working():
    refused(post_standard(YEAR_ZERO, "evt_bad"))
    assert post_standard("2026-01-01T00:00:00Z", "evt_good").status_code == 202


# Every verifier's event-time parser, fed extreme and malformed values.

moments = st.datetimes(
    min_value=datetime.min,
    max_value=datetime.max,
    timezones=st.builds(
        timezone,
        st.timedeltas(
            min_value=timedelta(hours=-23, minutes=-59),
            max_value=timedelta(hours=23, minutes=59),
        ),
    ),
)
iso_times = st.one_of(
    st.sampled_from([YEAR_ZERO, YEAR_10000, FAR_OFFSET]),
    moments.map(datetime.isoformat),
    st.datetimes().map(datetime.isoformat),  # naive
    st.text(max_size=40),
    st.integers(),
    st.none(),
)
epoch_seconds = st.one_of(
    st.integers(FIRST_SECOND - 10**6, FIRST_SECOND + 2 * 86400),
    st.integers(LAST_SECOND - 2 * 86400, LAST_SECOND + 10**6),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=12),
    st.none(),
)
SIGN = {
    "github": (signing.GITHUB_SECRET, signing.github_headers),
    "stripe": (signing.STRIPE_SECRET, signing.stripe_headers),
    "standard": (signing.STANDARD_SECRET, signing.standard_headers),
    "hmac": (signing.HMAC_SECRET, signing.hmac_headers),
}


def in_range(moment):
    return moment.utcoffset() == timedelta(0) and (
        EARLIEST_EVENT_TIME <= moment <= LATEST_EVENT_TIME
    )


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(SIGN)), timestamp=iso_times, created=epoch_seconds)
@example(kind="standard", timestamp=YEAR_ZERO, created=None)
@example(kind="standard", timestamp=YEAR_10000, created=None)
@example(kind="standard", timestamp=FAR_OFFSET, created=None)
@example(kind="stripe", timestamp=None, created=FIRST_SECOND)
@example(kind="stripe", timestamp=None, created=LAST_SECOND)
def test_every_verifier_returns_an_event_time_a_receipt_can_keep_or_refuses_400(
    kind, timestamp, created
):
    secret, sign = SIGN[kind]
    event = {"id": "evt_1", "type": "thing", "created": created}
    event["timestamp"] = timestamp
    body = json.dumps(event).encode()
    verifier = verifier_class(kind)(secrets=[secret])
    try:
        delivery = verifier.authenticate(body, sign(body))
    except VerificationFailed as exc:
        # Only the event's own time can be wrong here: the sender's bug.
        assert exc.reason == MALFORMED_BODY, exc.detail
        assert kind in ("stripe", "standard")
        return
    if delivery.occurred_at is not None:
        assert in_range(delivery.occurred_at), delivery.occurred_at
    if kind == "standard" and isinstance(timestamp, str):
        assert delivery.occurred_at == _aware(datetime.fromisoformat(timestamp))
    if kind in ("github", "hmac"):
        assert delivery.occurred_at is None  # they carry no event time


def _aware(moment):
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(timestamp=iso_times)
@example(timestamp=YEAR_ZERO)
@example(timestamp=YEAR_10000)
@example(timestamp=FAR_OFFSET)
@example(timestamp="0001-01-02T00:00:00+00:00")
def test_what_intake_accepts_the_database_keeps_and_a_worker_reads(timestamp):
    WebhookReceipt.objects.all().delete()
    response = post_standard(timestamp)
    assert response.status_code in (202, 400), response.content
    if response.status_code == 202:
        receipt = WebhookReceipt.objects.get()
        assert receipt.occurred_at is None or in_range(receipt.occurred_at)
        assert processing.process(receipt.pk) == processing.Outcome.SKIPPED


# A stored row that cannot be read (kept before intake checked event times).


def store_unreadable(delivery_id="evt_bad", **fields):
    """A received receipt whose occurred_at the database keeps but Python
    cannot hold: year 0 in UTC on PostgreSQL, a 13th month on SQLite."""
    receipt = WebhookReceipt.objects.create(
        source="standard",
        delivery_id=delivery_id,
        event_type="thing.happened",
        body=standard_body(YEAR_ZERO),
        received_at=django_timezone.now() - timedelta(minutes=1),
        **fields,
    )
    stored = YEAR_ZERO if connection.vendor == "postgresql" else "2026-13-45 00:00:00"
    table = connection.ops.quote_name(WebhookReceipt._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET occurred_at = %s WHERE id = %s", [stored, receipt.pk]
        )
    with pytest.raises(Exception):  # noqa: B017 (whatever the backend raises)
        WebhookReceipt.objects.get(pk=receipt.pk)
    return receipt.pk


def github_push(delivery_id="evt_push"):
    return WebhookReceipt.objects.create(
        source="github",
        delivery_id=delivery_id,
        event_type="push",
        body=b'{"id": "evt"}',
        received_at=django_timezone.now(),
    ).pk


def test_an_unreadable_receipt_fails_alone_and_the_drain_goes_on():
    pushes = []
    on("github", "push")(lambda event: pushes.append(event.delivery_id))
    bad = store_unreadable()
    good = github_push()
    retried = []

    assert processing.drain(10, retry=retried.append) == 2

    assert pushes == ["evt_push"]
    states = dict(WebhookReceipt.objects.values_list("pk", "state"))
    assert states == {bad: "failed", good: "processed"}
    failure = WebhookReceipt.objects.values_list("attempts", "last_error").get(pk=bad)
    assert failure[0] == 1
    assert f"receipt {bad} cannot be read" in failure[1]
    assert retried == []  # another read would fail the same way


def test_an_unreadable_receipt_given_to_a_worker_is_marked_failed_not_retried():
    bad = store_unreadable()

    with pytest.raises(processing.ReceiptUnreadable):
        processing.process(bad)

    assert WebhookReceipt.objects.values_list("state", flat=True).get(pk=bad) == (
        "failed"
    )


# The console.


@pytest.fixture
def operator(make_user):
    user = make_user("operator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_webhookreceipt"))
    return user


@WITHOUT_USE_TZ
def test_without_use_tz_the_console_lists_and_shows_a_timed_receipt(client, operator):
    receipt = WebhookReceipt.objects.create(
        source="standard",
        delivery_id="evt_1",
        event_type="thing.happened",
        occurred_at=datetime(2026, 1, 1, 7),
        body=standard_body("2026-01-01T12:00:00Z"),
        received_at=django_timezone.now(),
    )
    client.force_login(operator)

    listed = client.get("/admin/webhooks/webhookreceipt/")
    shown = client.get(f"/admin/webhooks/webhookreceipt/{receipt.pk}/change/")

    assert listed.status_code == 200
    assert shown.status_code == 200
    assert "evt_1" in listed.content.decode()


@pytest.mark.postgresql
def test_the_console_lists_and_shows_an_unreadable_receipt(client, operator):
    bad = store_unreadable()
    github_push()
    client.force_login(operator)

    listed = client.get("/admin/webhooks/webhookreceipt/")
    shown = client.get(f"/admin/webhooks/webhookreceipt/{bad}/change/")
    by_event_time = client.get("/admin/webhooks/webhookreceipt/?o=6")

    for response in (listed, shown, by_event_time):
        assert response.status_code == 200
        # As PostgreSQL writes it: 0001-12-31 23:00:00+00 BC.
        assert "0001-12-31 23:00:00+00 BC" in response.content.decode()
    assert "evt_push" in listed.content.decode()


@pytest.mark.postgresql
def test_the_console_can_replay_an_unreadable_receipt(client, operator):
    operator.user_permissions.add(
        Permission.objects.get(codename="replay_webhookreceipt")
    )
    bad = store_unreadable(state="failed")
    client.force_login(operator)

    response = client.post(
        "/admin/webhooks/webhookreceipt/",
        {"action": "replay", "_selected_action": [bad]},
    )

    assert response.status_code == 302
    state = WebhookReceipt.objects.values_list("state", flat=True).get(pk=bad)
    assert state == "received"


# A verifier of one's own: its event time goes through the same check.


class OwnVerifier(BaseVerifier):
    occurred_at: object = None

    def verify(self, body, headers):
        return Delivery("evt_1", "thing", occurred_at=self.occurred_at)


@pytest.mark.parametrize(
    ("occurred_at", "reason"),
    [
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), MALFORMED_BODY),
        (
            datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-1))),
            MALFORMED_BODY,
        ),
        (datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=16))), MALFORMED_BODY),
        (datetime(2026, 1, 1), VERIFIER_ERROR),  # naive: which zone?
        ("2026-01-01T00:00:00Z", VERIFIER_ERROR),
    ],
)
def test_a_custom_verifiers_event_time_is_checked_too(occurred_at, reason):
    verifier = OwnVerifier(secrets=["s"])
    verifier.occurred_at = occurred_at
    with pytest.raises(VerificationFailed) as caught:
        verifier.authenticate(b"{}", {})
    assert caught.value.reason == reason


def test_a_custom_verifiers_event_time_is_kept_in_utc():
    verifier = OwnVerifier(secrets=["s"])
    verifier.occurred_at = datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=14)))
    occurred_at = verifier.authenticate(b"{}", {}).occurred_at
    assert occurred_at == datetime(2025, 12, 31, 10, tzinfo=UTC)
    assert occurred_at.tzinfo is UTC
