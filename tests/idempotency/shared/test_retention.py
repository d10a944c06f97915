"""Retention: purge deletes exactly what is past retention, in batches."""

import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.querysets import IdempotencyRecordQuerySet
from idempotency.shared import contributions, retention
from tests.conftest import ApiClient, run_concurrently

pytestmark = pytest.mark.django_db


def make_record(key, *, expires_in, state="completed", locked_for=None):
    now = timezone.now()
    return IdempotencyRecord.objects.create(
        scope="user:1",
        operation="op",
        key=key,
        request_hash="h",
        state=state,
        created_at=now - timedelta(days=2),
        expires_at=now + expires_in,
        locked_until=now + locked_for if locked_for else None,
    )


@pytest.fixture
def mixed_records():
    return {
        "expired": make_record("expired", expires_in=timedelta(seconds=-1)),
        "expired-failed": make_record(
            "expired-failed", state="failed", expires_in=timedelta(hours=-1)
        ),
        "expired-stuck": make_record(
            "expired-stuck",
            state="pending",
            expires_in=timedelta(hours=-1),
            locked_for=timedelta(minutes=-5),
        ),
        "live": make_record("live", expires_in=timedelta(hours=1)),
        "expired-but-leased": make_record(
            "expired-but-leased",
            state="pending",
            expires_in=timedelta(hours=-1),
            locked_for=timedelta(minutes=5),
        ),
    }


def remaining_keys():
    return set(IdempotencyRecord.objects.values_list("key", flat=True))


def test_purge_deletes_expired_keys_and_nothing_else(mixed_records):
    counts = retention.purge(only=["idempotency"])

    assert counts == {"idempotency": 3}
    assert remaining_keys() == {"live", "expired-but-leased"}


def test_dry_run_deletes_nothing(mixed_records):
    assert retention.purge(only=["idempotency"], dry_run=True) == {"idempotency": 3}
    assert len(remaining_keys()) == 5


@pytest.mark.postgresql
def test_dry_run_counts_where_the_purge_deletes(mixed_records, reads_from_a_replica):
    # The rows are the test transaction's, which the replica cannot see: as
    # keys that expired on the primary and have not reached a replica yet.
    assert retention.purge(only=["idempotency"], dry_run=True) == {"idempotency": 3}
    assert retention.purge(only=["idempotency"]) == {"idempotency": 3}


@pytest.mark.postgresql
def test_a_purge_of_another_database_reads_and_deletes_there_only(
    mixed_records, other_alias
):
    # As a project whose events, messages and units live on another alias
    # (record(using=...), receive_steps(using=...)), with beat entries for it.
    out = StringIO()
    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections[other_alias]) as on_other,
    ):
        call_command(
            "purge_idempotency",
            f"--database={other_alias}",
            "--only=idempotency,units",
            stdout=out,
        )

    # The test's rows are uncommitted on "default": the other alias sees none.
    assert out.getvalue() == "idempotency: deleted 0\nunits: deleted 0\n"
    assert on_default.captured_queries == []
    assert any("DELETE" in query["sql"] for query in on_other.captured_queries)
    assert len(remaining_keys()) == 5


def test_a_purge_of_an_unknown_database_is_refused(mixed_records):
    with pytest.raises(CommandError, match="'nope'"):
        call_command("purge_idempotency", "--database=nope")
    assert len(remaining_keys()) == 5


def test_small_batches_delete_everything_and_report_progress(mixed_records):
    seen = []
    counts = retention.purge(
        only=["idempotency"], batch_size=1, progress=lambda kind, n: seen.append(n)
    )

    assert counts == {"idempotency": 3}
    assert seen == [1, 2, 3]


@pytest.fixture
def rests(monkeypatch):
    """The pauses the purge took, instead of taking them."""
    taken = []
    monkeypatch.setattr(retention.clock, "sleep", taken.append)
    return taken


def test_a_pause_rests_after_each_full_batch_only(mixed_records, rests):
    counts = retention.purge(only=["idempotency"], batch_size=2, pause=0.25)

    assert counts == {"idempotency": 3}
    # Batches of 2 then 1: a short batch is the last, with nothing to rest for.
    assert rests == [0.25]


def test_no_pause_never_rests(mixed_records, rests):
    retention.purge(only=["idempotency"], batch_size=1, pause=0)

    assert rests == []


def run_the_task(**options):
    from idempotency.tasks import purge

    return purge.run(**options)


@pytest.mark.parametrize(
    "purge",
    [
        retention.purge,
        run_the_task,
        lambda **options: call_command(
            "purge_idempotency", "--only=idempotency", "--batch-size=2"
        ),
    ],
    ids=["purge()", "task", "command"],
)
def test_by_default_a_purge_rests_a_moment_after_each_full_batch(
    purge, mixed_records, rests
):
    # Flat out, a large purge crowds the writers out of a small database.
    purge(only=["idempotency"], batch_size=2)

    assert rests == [retention.DEFAULT_PAUSE] == [0.005]
    assert len(remaining_keys()) == 2


@pytest.mark.parametrize("pause", [-1, float("nan"), float("inf")])
def test_a_negative_pause_is_refused(pause, mixed_records):
    with pytest.raises(ValueError, match="pause"):
        retention.purge(only=["idempotency"], pause=pause)
    assert len(remaining_keys()) == 5


@pytest.mark.parametrize("batch_size", [1.5, 2.0, "2", None, True])
def test_a_batch_size_not_a_whole_number_is_refused(batch_size, mixed_records):
    # As a beat entry's kwargs may give it: 1.5 ran batches of 1 and stopped
    # after the first (1 < 1.5 looked like the last batch), "2" failed
    # comparing it with 1.
    with pytest.raises(ValueError, match="batch_size must be a whole number"):
        run_the_task(only=["idempotency"], batch_size=batch_size)
    assert len(remaining_keys()) == 5


@pytest.mark.parametrize("pause", ["0.5", None, True])
def test_a_pause_not_a_number_is_refused(pause, mixed_records):
    with pytest.raises(ValueError, match="pause must be 0 or more seconds"):
        run_the_task(only=["idempotency"], pause=pause)
    assert len(remaining_keys()) == 5


@pytest.mark.parametrize("only", ["idempotency", "idempotency, units"])
def test_the_task_reads_kinds_written_as_the_command_takes_them(only, mixed_records):
    # A beat entry's kwargs {"only": "idempotency"} were read letter by letter.
    counts = run_the_task(only=only)

    assert counts["idempotency"] == 3
    assert "outbox" not in counts


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="nope"):
        retention.purge(only=["nope"])


@pytest.mark.parametrize("only", [5, ["idempotency", 3], [None], b"idempotency"])
def test_kinds_not_given_as_names_are_refused(only, mixed_records):
    # As a beat entry's kwargs may give them: a bare TypeError came out of
    # set(5) or of joining the unknown kinds' names.
    with pytest.raises(ValueError, match="only must be kind names"):
        run_the_task(only=only)
    assert len(remaining_keys()) == 5


def test_command_prints_counts(mixed_records):
    out = StringIO()
    call_command("purge_idempotency", "--only", "idempotency", stdout=out)

    assert "idempotency: deleted 3" in out.getvalue()


def test_command_dry_run_and_progress(mixed_records):
    out = StringIO()
    call_command("purge_idempotency", "--dry-run", "--only=idempotency", stdout=out)
    assert "idempotency: would delete 3" in out.getvalue()
    assert len(remaining_keys()) == 5

    out = StringIO()
    call_command(
        "purge_idempotency",
        "--batch-size=2",
        "--only=idempotency",
        verbosity=2,
        stdout=out,
    )
    assert "idempotency: 2 so far" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "nope"], "nope"),
        (["--only", ""], "at least one kind: idempotency, "),
        (["--only", ","], "at least one kind: idempotency, "),
        (["--batch-size", "0"], "at least 1"),
        (["--batch-size", "9223372036854775808"], "at most 100,000"),
        (["--pause", "-0.5"], "0 or more seconds"),
        (["--pause", "nan"], "0 or more seconds"),
        (["--pause", "inf"], "0 or more seconds"),
        (["--pause", "1e300"], "at most 60"),
    ],
)
def test_command_refuses_bad_options_readably(args, message, mixed_records):
    with pytest.raises(CommandError, match=message):
        call_command("purge_idempotency", *args)
    assert len(remaining_keys()) == 5  # nothing deleted


def test_a_command_interrupted_mid_batch_says_what_it_deleted(
    mixed_records, monkeypatch
):
    # Ctrl-C (or a lost connection) in the second batch's transaction: the
    # first batch is deleted and the second rolled back. The command said
    # nothing of the first, only a traceback.
    batches = []
    deleted_for_real = retention._delete_batch

    def interrupted(rows, using):
        batches.append(using)
        if len(batches) == 1:
            return deleted_for_real(rows, using)
        with transaction.atomic(using=using):
            rows.all().delete()
            raise KeyboardInterrupt

    monkeypatch.setattr(retention, "_delete_batch", interrupted)
    out = StringIO()
    with pytest.raises(CommandError, match="interrupted"):
        call_command(
            "purge_idempotency", "--only=idempotency", "--batch-size=2", stdout=out
        )

    assert "idempotency: deleted 2" in out.getvalue()
    assert len(remaining_keys()) == 3  # the second batch rolled back


@pytest.mark.postgresql
def test_a_command_meeting_a_table_not_migrated_says_what_it_deleted(
    mixed_records,
):
    # An app installed and never migrated: the kinds before it are purged,
    # then its DELETE fails. A ProgrammingError traceback said neither.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE outbox_message RENAME TO outbox_message_away")
    out = StringIO()
    with pytest.raises(CommandError, match=r"outbox_message.*does not exist"):
        call_command("purge_idempotency", "--only=idempotency,outbox", stdout=out)

    assert "idempotency: deleted 3" in out.getvalue()


def test_kinds_listed_with_spaces_are_read_as_written(mixed_records):
    # "idempotency, units" was refused: " units" is no kind.
    out = StringIO()
    call_command("purge_idempotency", "--only", "idempotency, units", stdout=out)

    assert "idempotency: deleted 3" in out.getvalue()
    assert "units: deleted 0" in out.getvalue()


def test_command_pauses_between_batches(mixed_records, rests):
    call_command(
        "purge_idempotency", "--only=idempotency", "--batch-size=1", "--pause=0.1"
    )

    assert rests == [0.1, 0.1, 0.1]


def test_celery_task_runs_the_same_purge(mixed_records, rests):
    from idempotency.tasks import purge

    assert purge.run(only=["idempotency"], batch_size=2, pause=0.5) == {
        "idempotency": 3
    }
    assert rests == [0.5]


class PausingQuerySet(IdempotencyRecordQuerySet):
    """Holds a purge batch open, locks taken, until the test lets it go."""

    paused = threading.Event()
    resume = threading.Event()

    def delete(self):
        PausingQuerySet.paused.set()
        PausingQuerySet.resume.wait(10)
        return super().delete()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_an_open_purge_batch_blocks_no_writer_of_new_keys(user, monkeypatch):
    for i in range(20):
        make_record(f"old-{i}", expires_in=timedelta(hours=-1))
    PausingQuerySet.paused.clear()
    PausingQuerySet.resume.clear()
    kinds = contributions.retention_kinds()
    monkeypatch.setattr(
        contributions,
        "retention_kinds",
        lambda: {
            **kinds,
            "idempotency": [
                lambda now: PausingQuerySet(IdempotencyRecord).purgeable(now)
            ],
        },
    )

    def run(i):
        if i == 0:
            return retention.purge(only=["idempotency"], batch_size=10)
        PausingQuerySet.paused.wait(10)
        try:
            client = ApiClient(user.username)
            return [
                client.post("/t/widgets/", {"name": "n"}, key=f"new-{n}").status_code
                for n in range(5)
            ]
        finally:
            PausingQuerySet.resume.set()

    # The writer finishes while the batch is still open (it sets resume last).
    counts, statuses = run_concurrently(2, run, timeout=20)

    assert statuses == [201] * 5
    assert counts == {"idempotency": 20}
    assert {k for k in remaining_keys() if k.startswith("new-")} == {
        f"new-{n}" for n in range(5)
    }


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_retry_of_a_key_deleted_by_purge_mid_claim_runs_as_new(api, monkeypatch):
    """The claim found the expired key; purge deleted it before the lock."""
    api.post("/t/widgets/", {"name": "a"}, key="k")
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    original = IdempotencyRecordQuerySet.lock_key

    def lock_after_purge(self, *args, **kwargs):
        retention.purge(only=["idempotency"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(IdempotencyRecordQuerySet, "lock_key", lock_after_purge)
    answer = api.post("/t/widgets/", {"name": "a"}, key="k")

    assert answer.status_code == 201
    assert "Idempotent-Replayed" not in answer


class LateQuerySet(IdempotencyRecordQuerySet):
    """Takes its batch's snapshot, then lets a retry take an expired key over
    and commit before the DELETE locks it (the first batch only)."""

    snapshot_taken = threading.Event()
    taken_over = threading.Event()

    def delete(self):
        if not LateQuerySet.snapshot_taken.is_set():
            IdempotencyRecord.objects.using(self.db).exists()  # the snapshot
            LateQuerySet.snapshot_taken.set()
            LateQuerySet.taken_over.wait(10)
        return super().delete()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_key_taken_over_after_a_batchs_snapshot_is_kept_and_the_purge_goes_on(
    user, monkeypatch, isolation_level
):
    # REPEATABLE READ refuses the batch's lock on the row changed after its
    # snapshot: the batch runs again with a new snapshot, which sees the key
    # live again.
    client = ApiClient(user.username)
    for i in range(20):
        client.post("/t/widgets/", {"name": "n"}, key=f"old-{i}")
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(hours=1))
    LateQuerySet.snapshot_taken.clear()
    LateQuerySet.taken_over.clear()
    kinds = contributions.retention_kinds()
    monkeypatch.setattr(
        contributions,
        "retention_kinds",
        lambda: {
            **kinds,
            "idempotency": [lambda now: LateQuerySet(IdempotencyRecord).purgeable(now)],
        },
    )

    def run(i):
        if i == 0:
            return retention.purge(only=["idempotency"], batch_size=50)
        LateQuerySet.snapshot_taken.wait(10)
        try:
            return client.post("/t/widgets/", {"name": "n"}, key="old-0").status_code
        finally:
            LateQuerySet.taken_over.set()

    counts, status = run_concurrently(2, run, timeout=20)

    assert status == 201
    assert counts == {"idempotency": 19}
    assert remaining_keys() == {"old-0"}
    assert IdempotencyRecord.objects.get(key="old-0").state == "completed"


@pytest.mark.postgresql
def test_a_purge_of_another_database_of_every_kind_reads_nothing_elsewhere(
    mixed_records, other_alias
):
    # docs/retention.md: "every statement of the purge, the owners that keep
    # a unit included, runs there", for every kind, the dry run's counts too.
    for dry_run in ([], ["--dry-run"]):
        out = StringIO()
        with CaptureQueriesContext(connections["default"]) as on_default:
            call_command(
                "purge_idempotency", f"--database={other_alias}", *dry_run, stdout=out
            )

        assert on_default.captured_queries == []
        assert out.getvalue().splitlines() == [
            f"{kind}: {'would delete' if dry_run else 'deleted'} 0"
            for kind in ("idempotency", "units", "outbox", "inbox", "webhooks")
        ]
    assert len(remaining_keys()) == 5


class OutboxOnItsOwn:
    """A router that keeps the outbox on a database of its own."""

    def db_for_read(self, model, **hints):
        return "other" if model._meta.app_label == "outbox" else None

    db_for_write = db_for_read


@pytest.mark.postgresql
def test_a_purge_deletes_each_kind_where_a_router_keeps_it(
    mixed_records, other_alias, settings
):
    settings.DATABASE_ROUTERS = [f"{__name__}.OutboxOnItsOwn"]

    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections[other_alias]) as on_other,
    ):
        counts = retention.purge()

    assert counts["idempotency"] == 3
    assert not [q for q in on_default if "outbox_message" in q["sql"]]
    statements = [q["sql"] for q in on_other if q["sql"] not in ("BEGIN", "COMMIT")]
    assert statements and all("outbox_message" in sql for sql in statements)
