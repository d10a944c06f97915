"""The claim statement: insert the key alone, or insert it and read its record.

``idempotency.querysets`` claims a key with a guarded INSERT that returns the
new record's id or nothing; an existing key's record is then locked and read.
The claim used to read it too, in the same statement: the INSERT, then
``UNION ALL`` a SELECT of the key's record. This part sends both forms
by psycopg, in autocommit (as a lease claim runs), alternating, on a new key
and on a key that exists, so ``docs/benchmarks.md`` says what the choice costs.
"""

import time
import uuid
from datetime import timedelta

from django.db import connections
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.querysets import _BOUND_LOCK_TIMEOUT, _prepare

from . import floors
from .stats import median_ms, table

ROUNDS = 20
PER_ROUND = 100
SCOPE, OPERATION = "user:0", "bench.claim-statement"
INSERT_ALONE = "guarded INSERT (the claim)"
INSERT_OR_READ = "guarded INSERT or read, one statement (the former claim)"


def _insert_or_read(statements) -> str:
    """The former claim: the row it inserted, or the key's record, in one."""
    insert = statements.insert
    restore = "set_config('lock_timeout', (SELECT previous FROM guard), true)"
    selected = statements.read.split(" FROM ")[0].removeprefix("SELECT ")
    nulls = ", ".join(["NULL"] * selected.count(","))
    return (
        "WITH guard AS (SELECT current_setting('lock_timeout') AS previous, "
        f"{_BOUND_LOCK_TIMEOUT} AS bounded), "
        f"inserted AS (INSERT INTO {insert.table} ({insert.columns}) "
        f"SELECT {insert.placeholders} FROM guard "
        f"ON CONFLICT DO NOTHING RETURNING {insert.pk_column}) "
        f"SELECT TRUE, {insert.pk_column}, {nulls}, {restore} FROM inserted "
        f"UNION ALL SELECT FALSE, {selected}, {restore} "
        f"FROM {statements.read.split(' FROM ', 1)[1]}"
    )


def run() -> str:
    statements, _converters = _prepare(IdempotencyRecord, connections["default"])
    forms = {
        INSERT_ALONE: statements.claim,
        INSERT_OR_READ: _insert_or_read(statements),
    }
    existing = str(uuid.uuid4())
    samples: dict[tuple[str, bool], list[int]] = {}
    with floors.connect() as connection:

        def send(sql, key) -> int:
            params = _params(statements, key)
            if sql is not statements.claim:
                params += [SCOPE, OPERATION, key]
            started = time.perf_counter_ns()
            connection.execute(sql, params).fetchall()
            return time.perf_counter_ns() - started

        send(statements.claim, existing)
        for number in range(ROUNDS):
            order = list(forms.items())
            for name, sql in order if number % 2 else order[::-1]:
                for _ in range(PER_ROUND):
                    elapsed = send(sql, str(uuid.uuid4()))
                    samples.setdefault((name, True), []).append(elapsed)
                    elapsed = send(sql, existing)
                    samples.setdefault((name, False), []).append(elapsed)
        IdempotencyRecord.objects.filter(operation=OPERATION).delete()
    rows = [
        (
            name,
            f"{median_ms(samples[name, True]) * 1000:.0f}",
            f"{median_ms(samples[name, False]) * 1000:.0f}",
        )
        for name in forms
    ]
    return (
        "### The claim statement\n\n"
        "The claim inserts a key unless it exists, its wait on a concurrent "
        "insert bounded. It used to read an existing key's record in the same "
        "statement (`UNION ALL`), for the one case it served: a record "
        "completed between the replay read and the claim. Any other existing "
        "key is then locked and read again in both forms. Both by psycopg in "
        f"autocommit, {ROUNDS} alternating rounds of {PER_ROUND} "
        "(`bench.claim_statement`), on a new key (the insert commits) and on "
        "an existing one:\n\n"
        + table(("statement", "new key, median us", "existing key, median us"), rows)
    )


def _params(statements, key) -> list:
    now = timezone.now()
    values = {
        "scope": SCOPE,
        "operation": OPERATION,
        "key": key,
        "request_hash": "0" * 64,
        "state": IdempotencyRecord.State.PENDING,
        "attempts": 1,
        "locked_until": now + timedelta(seconds=30),
        "created_at": now,
        "expires_at": now + timedelta(days=1),
    }
    return ["1000ms", *statements.insert.params(values, connections["default"])]
