"""The statements a keyed request sends to PostgreSQL, pinned one by one.

Each is a network round trip, and under load a round trip costs more than
anything the claim computes: a new one must show here as a failing test.
The views are the same DRF create view with and without the mixin.
"""

import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import path
from rest_framework import mixins, viewsets

from idempotency.mixins import IdempotencyMixin
from idempotency.models import IdempotencyRecord
from tests.conftest import ApiClient
from tests.testapp.views import WidgetSerializer

pytestmark = [
    pytest.mark.postgresql,
    # Committed transactions: the statements a server sends, BEGIN included.
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]

AUTH = "SELECT auth_user"  # HTTP Basic: the user, before any key is read
CLAIM = "WITH idempotency_idempotencyrecord"  # insert the key unless it exists
READ = "SELECT idempotency_idempotencyrecord"  # a replay's one read, unlocked
CREATE = "INSERT testapp_widget"  # the view's own write
COMPLETE = "UPDATE idempotency_idempotencyrecord"  # store the answer, fenced
SAVEPOINT, RELEASE = "SAVEPOINT", "RELEASE"  # around the view (atomic mode)


class BareViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    serializer_class = WidgetSerializer


class KeyedViewSet(IdempotencyMixin, BareViewSet):
    idempotency_operation = "round-trips.atomic"


class LeasedViewSet(KeyedViewSet):
    idempotency_mode = "lease"
    idempotency_operation = "round-trips.lease"


urlpatterns = [
    path("bare/", BareViewSet.as_view({"post": "create"})),
    path("keyed/", KeyedViewSet.as_view({"post": "create"})),
    path("leased/", LeasedViewSet.as_view({"post": "create"})),
]


@pytest.fixture
def send(user):
    client = ApiClient(user.username)

    def send(path, key=None):
        with CaptureQueriesContext(connection) as queries:
            response = client.post(path, {"name": "w"}, key=key)
        assert response.status_code == 201, response.content
        return [_statement(query["sql"]) for query in queries.captured_queries]

    return send


def _statement(sql: str) -> str:
    """The verb and the first table named: ``INSERT testapp_widget``."""
    # A SELECT names its columns first: its table follows FROM.
    table = re.search(r'(?:^SELECT .*? FROM )?"(\w+)"', sql)
    verb = sql.split(None, 1)[0].upper()
    if verb in (SAVEPOINT, RELEASE):
        return verb  # named after the thread, not a table
    return f"{verb} {table.group(1)}" if table else verb


def test_the_bare_view_authenticates_and_writes(send):
    assert send("/bare/") == [AUTH, CREATE]


def test_an_atomic_first_request_adds_seven(send):
    # The read that answers a replay without a transaction finds nothing.
    # Then one transaction: the claim, the view's write and the stored answer.
    # The view runs in a savepoint, so a failing view rolls back its work but
    # not the claim, which commits as failed: a duplicate waiting on the key
    # then finds it (422 for another payload) instead of a vanished key.
    assert send("/keyed/", key=str(uuid.uuid4())) == [
        AUTH,
        READ,
        "BEGIN",
        CLAIM,
        SAVEPOINT,
        CREATE,
        COMPLETE,
        RELEASE,
        "COMMIT",
    ]


def test_a_lease_first_request_adds_five(send):
    # The replay read finds nothing; the claim commits by itself (autocommit:
    # no BEGIN, no COMMIT of its own), then the view's write and the answer
    # commit together.
    assert send("/leased/", key=str(uuid.uuid4())) == [
        AUTH,
        READ,
        CLAIM,
        "BEGIN",
        CREATE,
        COMPLETE,
        "COMMIT",
    ]


def test_an_atomic_replay_is_one_select(send):
    key = str(uuid.uuid4())
    send("/keyed/", key=key)

    # A live completed record never changes: one unlocked read answers it,
    # with no transaction, no claim and nothing written.
    assert send("/keyed/", key=key) == [AUTH, READ]


def test_a_lease_replay_is_one_select(send):
    key = str(uuid.uuid4())
    send("/leased/", key=key)

    # As in atomic mode: one unlocked read, no claim, nothing written.
    assert send("/leased/", key=key) == [AUTH, READ]


def _failed(key, clock):
    IdempotencyRecord.objects.filter(key=key).update(state="failed")


def _expired(key, clock):
    clock.advance(days=2)


@pytest.mark.parametrize("spoil", [_failed, _expired], ids=["failed", "expired"])
def test_a_key_not_live_and_completed_takes_the_claim_path(send, clock, spoil):
    key = str(uuid.uuid4())
    send("/keyed/", key=key)
    spoil(key, clock)

    # Only a live completed record is answered from the read: a failed or
    # expired one is taken over under the claim's lock, in its transaction,
    # and the view runs again.
    assert send("/keyed/", key=key) == [
        AUTH,
        READ,
        "BEGIN",
        CLAIM,
        "SELECT",  # bound the lock's wait
        READ,  # locked
        "SELECT",  # put the timeout back
        "UPDATE idempotency_idempotencyrecord",  # take the key over
        SAVEPOINT,
        CREATE,
        COMPLETE,
        RELEASE,
        "COMMIT",
    ]
