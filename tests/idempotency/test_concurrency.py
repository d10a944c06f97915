"""Same-key races on PostgreSQL: real threads, real connections, real commits."""

import json
import threading
import uuid

import pytest
from django.db import transaction

from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from idempotency.querysets import IdempotencyRecordQuerySet
from tests.conftest import ApiClient, run_concurrently
from tests.testapp import views
from tests.testapp.models import Widget

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def test_sixteen_identical_requests_at_once_create_exactly_one_widget(user):
    clients = [ApiClient(user.username) for _ in range(16)]
    for _round in range(20):
        key = str(uuid.uuid4())

        def send(i, key=key):
            return clients[i].post("/t/widgets/", {"name": key}, key=key)

        answers = run_concurrently(16, send)
        statuses = sorted(answer.status_code for answer in answers)
        assert Widget.objects.filter(name=key).count() == 1, statuses
        winners = [
            a
            for a in answers
            if a.status_code == 201 and "Idempotent-Replayed" not in a
        ]
        assert len(winners) == 1, statuses
        for answer in answers:
            assert answer.status_code in (201, 409), statuses
            if answer.status_code == 409:
                assert answer["Retry-After"].isdigit()
                assert json.loads(answer.content)["type"].endswith("/request-in-flight")
            elif answer is not winners[0]:
                assert answer.content == winners[0].content
    assert IdempotencyRecord.objects.filter(state="completed").count() == 20


def _racing_duplicate(user, monkeypatch, send=lambda post: post()):
    """The first POST of key "k" holds its view until 0.2 s after a second
    client sending the same one (``send`` wraps that send) reached its
    claim; both answers."""
    release, entered, claimed = threading.Event(), threading.Event(), threading.Event()
    original_create = views.WidgetViewSet.create
    original_claim = IdempotencyRecordQuerySet.claim

    def slow_create(self, request, *args, **kwargs):
        entered.set()
        release.wait(10)
        return original_create(self, request, *args, **kwargs)

    def claim(self, *args, **kwargs):
        # From the second's claim, not from its send: a loaded machine can
        # run the second so late that its first read (and, in a caller's
        # transaction, its snapshot) came after the first committed.
        if entered.is_set() and not claimed.is_set():  # lease mode polls
            claimed.set()
            threading.Timer(0.2, release.set).start()
        return original_claim(self, *args, **kwargs)

    monkeypatch.setattr(views.WidgetViewSet, "create", slow_create)
    monkeypatch.setattr(IdempotencyRecordQuerySet, "claim", claim)
    first, second = ApiClient(user.username), ApiClient(user.username)

    def run(i):
        if i == 0:
            return first.post("/t/widgets/", {"name": "a"}, key="k")
        entered.wait(10)
        return send(lambda: second.post("/t/widgets/", {"name": "a"}, key="k"))

    return run_concurrently(2, run)


@pytest.mark.parametrize("mode", ["atomic", "lease"])
def test_a_duplicate_waits_for_the_first_then_replays(
    user, monkeypatch, isolation_level, mode
):
    monkeypatch.setattr(views.WidgetViewSet, "idempotency_mode", mode)

    answers = _racing_duplicate(user, monkeypatch)

    assert answers[0].status_code == 201
    assert answers[1].status_code == 201
    assert answers[1]["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("isolation_level", ["repeatable read"], indirect=True)
def test_a_raced_duplicate_in_a_callers_transaction_gets_409(
    user, monkeypatch, isolation_level
):
    # The caller's snapshot predates the first request's commit, and stays:
    # the claim cannot be taken again in it, so the client is told to retry.
    def in_a_transaction(post):
        with transaction.atomic():
            return post()

    answers = _racing_duplicate(user, monkeypatch, send=in_a_transaction)

    assert answers[0].status_code == 201
    assert answers[1].status_code == 409
    assert answers[1]["Retry-After"]
    assert Widget.objects.count() == 1


def test_a_duplicate_gets_409_with_retry_after_once_the_wait_is_over(
    user, monkeypatch, settings
):
    settings.IDEMPOTENCY = {"WAIT": 0.2}
    release = threading.Event()
    entered = threading.Event()
    original_create = views.WidgetViewSet.create

    def stuck_create(self, request, *args, **kwargs):
        entered.set()
        release.wait(10)
        return original_create(self, request, *args, **kwargs)

    monkeypatch.setattr(views.WidgetViewSet, "create", stuck_create)
    client = ApiClient(user.username)

    def run(i):
        if i == 0:
            return client.post("/t/widgets/", {"name": "a"}, key="k")
        entered.wait(10)
        try:
            return ApiClient(user.username).post("/t/widgets/", {"name": "a"}, key="k")
        finally:
            release.set()

    first, duplicate = run_concurrently(2, run)

    assert duplicate.status_code == 409
    assert duplicate["Retry-After"] == "1"
    assert first.status_code == 201
    assert Widget.objects.count() == 1


def test_the_wait_bound_does_not_leak_into_the_views_own_locks(
    user, monkeypatch, settings
):
    """lock_timeout applies to the claim only: the view may wait on its rows."""
    settings.IDEMPOTENCY = {"WAIT": 0.1}
    widget = Widget.objects.create(name="shared")
    locked = threading.Event()
    original_create = views.WidgetViewSet.create

    def create_after_row_lock(self, request, *args, **kwargs):
        Widget.objects.select_for_update().get(pk=widget.pk)
        return original_create(self, request, *args, **kwargs)

    monkeypatch.setattr(views.WidgetViewSet, "create", create_after_row_lock)

    def run(i):
        from django.db import transaction

        if i == 0:
            with transaction.atomic():
                Widget.objects.select_for_update().get(pk=widget.pk)
                locked.set()
                threading.Event().wait(0.5)  # hold the row past WAIT
            return None
        locked.wait(10)
        return ApiClient(user.username).post("/t/widgets/", {"name": "b"}, key="k")

    _, answer = run_concurrently(2, run)

    assert answer.status_code == 201


def test_a_duplicate_taking_over_a_failed_key_keeps_the_projects_lock_timeout(
    user, monkeypatch, settings
):
    """The claim puts the wait bound back after waiting on a first attempt that
    then failed, so the duplicate's view may wait on its rows past WAIT."""
    settings.IDEMPOTENCY = {"WAIT": 1}
    widget = Widget.objects.create(name="shared")
    first_entered, release_first = threading.Event(), threading.Event()
    views_run = []
    original_create = views.WidgetViewSet.create

    def create(self, request, *args, **kwargs):
        views_run.append(request.data["name"])
        if len(views_run) == 1:
            first_entered.set()
            release_first.wait(10)  # the duplicate waits on the key meanwhile
            raise RuntimeError("the first attempt fails")
        # The duplicate, having taken the failed key over, waits for a row
        # another transaction holds past WAIT.
        Widget.objects.select_for_update().get(pk=widget.pk)
        return original_create(self, request, *args, **kwargs)

    monkeypatch.setattr(views.WidgetViewSet, "create", create)

    def run(i):
        from django.db import transaction

        client = ApiClient(user.username)
        client.client.raise_request_exception = False
        if i == 0:
            return client.post("/t/widgets/", {"name": "a"}, key="k")
        first_entered.wait(10)
        if i == 1:
            with transaction.atomic():
                Widget.objects.select_for_update().get(pk=widget.pk)
                threading.Event().wait(2.5)  # 2 s past WAIT for the duplicate
            return None
        threading.Timer(0.3, release_first.set).start()
        return client.post("/t/widgets/", {"name": "a"}, key="k")

    first, _, duplicate = run_concurrently(3, run)

    assert first.status_code == 500
    assert duplicate.status_code == 201, duplicate.content
    assert views_run == ["a", "a"]


def test_two_users_with_the_same_key_and_payload_get_their_own_results(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    clients = {"alice": ApiClient("alice"), "bob": ApiClient("bob")}
    names = ["alice", "bob"] * 4

    answers = run_concurrently(
        8,
        lambda i: clients[names[i]].post(
            "/api/orders/", {"sku": "A", "quantity": 1}, key="same"
        ),
    )

    by_user = {name: set() for name in clients}
    for name, answer in zip(names, answers, strict=True):
        if answer.status_code == 201:
            by_user[name].add(answer.json()["id"])
    from tests.testapp.models import Order

    assert Order.objects.filter(owner=alice).count() == 1
    assert Order.objects.filter(owner=bob).count() == 1
    assert by_user["alice"] <= {Order.objects.get(owner=alice).pk}
    assert by_user["bob"] <= {Order.objects.get(owner=bob).pk}


@pytest.mark.parametrize("mode", ["atomic", "lease"])
def test_the_anonymous_cap_holds_when_forty_new_keys_arrive_at_once(
    settings, monkeypatch, mode
):
    # WAIT outlasts the queue: every claim counts, none gives up with a 409.
    settings.IDEMPOTENCY = {"ANONYMOUS_MAX_KEYS": 5, "WAIT": 30}
    monkeypatch.setattr(views.AnonymousWidgetViewSet, "idempotency_mode", mode)
    clients = [ApiClient() for _ in range(40)]

    answers = run_concurrently(
        40, lambda i: clients[i].post("/t/anonymous/", {"name": "w"}, key=f"k{i}")
    )

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201] * 5 + [429] * 35
    assert IdempotencyRecord.objects.filter(scope="anonymous").count() == 5
    assert Widget.objects.count() == 5


@pytest.mark.parametrize("isolation_level", ["repeatable read"], indirect=True)
@pytest.mark.parametrize("mode", ["atomic", "lease"])
def test_the_anonymous_cap_is_refused_under_repeatable_read(
    settings, monkeypatch, isolation_level, mode
):
    # Its count would miss the claims committed while it waited for the cap's
    # lock (its snapshot is older), and let them all in: refused, loudly.
    settings.IDEMPOTENCY = {"ANONYMOUS_MAX_KEYS": 5}
    monkeypatch.setattr(views.AnonymousWidgetViewSet, "idempotency_mode", mode)

    with pytest.raises(IdempotencyConfigurationError, match="REPEATABLE READ"):
        ApiClient().post("/t/anonymous/", {"name": "w"}, key="k")

    assert not Widget.objects.exists()
    assert not IdempotencyRecord.objects.exists()


def _first_fails_while_a_duplicate_waits(user, monkeypatch, mode, second_name):
    """The first request (name "a") fails in its view while a second one with
    the same key waits for it; return the second's answer."""
    monkeypatch.setattr(views.WidgetViewSet, "idempotency_mode", mode)
    entered, release = threading.Event(), threading.Event()
    original_create = views.WidgetViewSet.create

    def failing_create(self, request, *args, **kwargs):
        if request.data["name"] == "a":
            entered.set()
            release.wait(10)
            original_create(self, request, *args, **kwargs)  # rolled back
            raise RuntimeError("the first attempt fails")
        return original_create(self, request, *args, **kwargs)

    monkeypatch.setattr(views.WidgetViewSet, "create", failing_create)

    def run(i):
        client = ApiClient(user.username)
        client.client.raise_request_exception = False
        if i == 0:
            return client.post("/t/widgets/", {"name": "a"}, key="k")
        entered.wait(10)
        threading.Timer(0.3, release.set).start()
        return client.post("/t/widgets/", {"name": second_name}, key="k")

    first, second = run_concurrently(2, run)
    assert first.status_code == 500
    return second


@pytest.mark.parametrize("mode", ["atomic", "lease"])
@pytest.mark.parametrize(
    ("second_name", "status", "attempts"),
    [
        # Same key, another payload: refused, though the first rolled back.
        ("b", 422, 1),
        # The same payload runs again (and fails again: the view fails "a").
        ("a", 500, 2),
    ],
)
def test_a_duplicate_waiting_on_a_failed_first_attempt_is_decided_by_its_record(
    user, monkeypatch, settings, mode, second_name, status, attempts
):
    settings.IDEMPOTENCY = {"WAIT": 5}

    second = _first_fails_while_a_duplicate_waits(user, monkeypatch, mode, second_name)

    assert second.status_code == status
    if status == 422:
        assert json.loads(second.content)["type"].endswith("/key-reused")
    assert not Widget.objects.exists()
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.attempts) == ("failed", attempts)
