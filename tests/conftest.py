import base64
from contextlib import contextmanager

import psycopg
import pytest
from django.contrib.auth.models import Permission
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

# Re-exported: the suite's concurrency tests import it from here.
from idempotency.shared.steps.models import UnitRecord
from idempotency.shared.testing.threads import run_concurrently  # noqa: F401
from outbox import relay
from outbox.kicks import relay_kicker
from tests.testapp import views
from tests.testapp.downstream import provider


def pytest_collection_modifyitems(config, items):
    if connection.vendor != "postgresql":
        skip = pytest.mark.skip(reason="needs PostgreSQL")
        for item in items:
            if "postgresql" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reset_doubles():
    for name in views.faults:
        views.faults[name] = 0
    provider.reset()
    relay_kicker.reset()  # each test starts outside any kick window
    yield


def basic_auth(username, password="pw"):
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return f"Basic {token}"


@pytest.fixture
def make_user(django_user_model):
    def make(username="alice", **extra):
        return django_user_model.objects.create_user(username, password="pw", **extra)

    return make


@pytest.fixture
def user(make_user):
    return make_user()


@pytest.fixture
def api(user):
    """A client authenticated as ``user`` with HTTP Basic, like a server script."""
    return ApiClient(user.username)


class ApiClient:
    """Django's test client with Basic auth and JSON bodies by default."""

    def __init__(self, username=None):
        self.client = Client()
        self.auth = basic_auth(username) if username else None

    def post(
        self, path, data=None, *, key=None, content_type="application/json", **headers
    ):
        if key is not None:
            headers["Idempotency-Key"] = key
        if self.auth:
            headers.setdefault("Authorization", self.auth)
        if data is not None and not isinstance(data, bytes | str):
            import json

            data = json.dumps(data)
        return self.client.post(
            path, data=data or b"", content_type=content_type, headers=headers
        )

    def get(self, path, **headers):
        if self.auth:
            headers.setdefault("Authorization", self.auth)
        return self.client.get(path, headers=headers)


@pytest.fixture
def fakes(monkeypatch):
    """The fake downstream services (tests.fakes), where the views, consumers
    and handlers under test find them."""
    from tests.fakes import URL_VARIABLE, fake_services

    with fake_services() as running:
        monkeypatch.setenv(URL_VARIABLE, running.url)
        yield running


@pytest.fixture
def steady_backoff(monkeypatch):
    """The relay's backoff at its ceiling, without jitter. Full jitter may draw
    a delay of a few milliseconds, making a failed message due again within
    the same drain: a test counting one failure per message per drain uses
    this (a draw near zero made such tests fail now and then)."""
    monkeypatch.setattr(relay, "backoff", relay.backoff_ceiling)


ISOLATION_LEVELS = {
    "read committed": psycopg.IsolationLevel.READ_COMMITTED,
    "repeatable read": psycopg.IsolationLevel.REPEATABLE_READ,
}


@pytest.fixture(params=list(ISOLATION_LEVELS))
def isolation_level(request):
    """Run the test's transactions at each level: its own thread and every
    thread it starts connect anew with it. Under REPEATABLE READ, PostgreSQL
    refuses a claim that meets a row committed after its snapshot, where
    READ COMMITTED waits and goes on (idempotency.shared.isolation)."""
    if connection.vendor != "postgresql":
        pytest.skip("isolation levels are PostgreSQL's here")
    options = connections.settings[connection.alias].setdefault("OPTIONS", {})
    saved = dict(options)
    options["isolation_level"] = ISOLATION_LEVELS[request.param]
    connection.close()
    yield request.param
    options.clear()
    options.update(saved)
    connection.close()


@pytest.fixture
def clock(once_clock):
    """Move the apps' clock forward without sleeping (the proof kit's clock)."""
    return once_clock


@pytest.fixture
def abandon_in_console(make_user):
    """Abandon a unit of work as an operator does: the console's action,
    posted by a logged-in operator with the permission."""
    operator = make_user("unit-operator", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_unitrecord", "abandon_unitrecord"]
        )
    )
    console = Client()
    console.force_login(operator)

    def abandon(identity: str):
        return console.post(
            "/admin/idempotency/unitrecord/",
            {"action": "abandon_units", "_selected_action": [identity]},
        )

    return abandon


def given_up_unit(unit, state, **fields) -> UnitRecord:
    """The row of ``unit`` (a ``Unit``) as giving it up left it: ``state``
    compensated, or compensating when an undo raised."""
    now = timezone.now()
    return UnitRecord.objects.create(
        id=unit.identity,
        kind=unit.kind,
        intent="i",
        state=state,
        reason="its attempts ran out",
        created_at=now,
        updated_at=now,
        **fields,
    )


class ReadsFromAReplica:
    """A router sending reads to "replica", a second alias on the test
    database, and writes to "default": a project reading from a replica."""

    def db_for_read(self, model, **hints):
        return "replica"

    def db_for_write(self, model, **hints):
        return "default"

    def allow_relation(self, obj1, obj2, **hints):
        return True


@pytest.fixture
def reads_from_a_replica(settings):
    connections.settings["replica"] = dict(connections.settings["default"])
    # Connected here: the test case's guard refuses aliases it was not told
    # of, and this one is not in the settings it was set up with.
    connections["replica"].connect()
    settings.DATABASE_ROUTERS = ["tests.conftest.ReadsFromAReplica"]
    yield "replica"
    connections["replica"].close()
    del connections["replica"]
    del connections.settings["replica"]


@pytest.fixture
def other_alias():
    """A second alias on the test database, as a project whose inbox and
    business tables live on a database other than "default" names it."""
    connections.settings["other"] = dict(connections.settings["default"])
    # Connected here: the test case's guard refuses aliases it was not told
    # of, and this one is not in the settings it was set up with.
    connections["other"].connect()
    yield "other"
    connections["other"].close()
    del connections["other"]
    del connections.settings["other"]


@contextmanager
def replica_behind(alias="replica"):
    """Stop the replica where it is: inside the block, its reads see the
    database as it was on entry (a REPEATABLE READ snapshot), as a replica
    lagging behind the primary's commits would."""
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("SELECT 1")  # takes the snapshot
        yield
