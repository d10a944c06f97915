"""Keyed POSTs against a bare DRF create view, in-process and under gunicorn.

The bare view creates one order and nothing else; the keyed views are the
same view with the mixin, in atomic and in lease mode, and the replay sends
an atomic key again. The floor view only authenticates and answers: no
keyed request can cost less. Real commits on PostgreSQL; the kinds are
interleaved in rounds so drift hits all. A second table keeps the
demo-shaped comparison: the demo's order view (order, outbox row, relay
kick) with and without the mixin.
"""

import cProfile
import os
import pstats
import time
import uuid

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connection
from django.db.backends.base import base as database_base
from django.test import Client
from django.test.utils import CaptureQueriesContext

from idempotency import claims, fingerprint, querysets, rendering, responses
from idempotency.models import IdempotencyRecord
from idempotency.querysets import IdempotencyRecordQuerySet
from outbox.models import OutboxMessage
from project.shop.models import Order

from . import cached_auth, claim_statement, clients, database, floors, processes
from .keys_orm import OrmRecordQuerySet
from .stats import median_ms, p95_ms, table

ROUNDS = 40
PER_ROUND = 50
WARMUP = 200
BODY = '{"sku": "BOOK-1", "quantity": 1}'
# Under gunicorn: sequential requests for latency, then concurrent clients.
WORKERS = 2
SERVER_ROUNDS = 10
SERVER_PER_ROUND = 30
CLIENTS = 4
PER_CLIENT = 150
# Throughput passes, each running every kind in turn: a burst of load from
# elsewhere on the machine then hits every kind, not just the one running.
PASSES = 5
PASSWORD = "bench-keys-password"
# Completed keys in the table before the first request (bench.growth draws
# the overhead as the table grows).
SEEDED_KEYS = 100_000

BARE = "bare view"
KEYED = "keyed, atomic"
LEASED = "keyed, lease"
REPLAY = "replay"
LEASE_REPLAY = "replay, lease"
FLOOR = "DRF floor"
# The first requests of each round, by kind; replays then resend KEYED's keys.
FIRSTS = {
    BARE: "/bare/orders/",
    KEYED: "/keyed/orders/",
    LEASED: "/leased/orders/",
    FLOOR: "/floor/orders/",
}
KEYED_PATHS = {KEYED, LEASED}
# The atomic first request without the read that answers a replay: what that
# read costs every first request (in-process, cached user only).
CLAIM_ONLY = "keyed, atomic, without the replay read"
# Ceilings on the ratio to the bare view's median, and floors on requests/s.
LATENCY_TARGETS = {KEYED: 1.45, REPLAY: 0.4}
THROUGHPUT_TARGETS = {KEYED: 0.85}
# Ceilings on the keys' overhead (keyed median - bare median) over the
# psycopg floor's (its transaction - the autocommit order INSERT), and on
# replay - DRF floor in indexed SELECTs.
OVERHEAD_TARGETS = {KEYED: 1.5, LEASED: 1.8}
REPLAY_SELECTS_TARGET = 2
# In-process authentication: the bench's cached user (no query) and the
# session (its row and the user's, every request).
CACHED = "cached user"
SESSION = "session"


def run() -> str:
    from .growth import fill_keys  # growth imports this module's senders

    database.prepare()
    database.empty(IdempotencyRecord, Order, OutboxMessage)
    # A table in use, analyzed: autovacuum may be off (it is on the bench's
    # machine), and a table analyzed empty is scanned whole by every read.
    fill_keys(1, SEEDED_KEYS)
    user = _bench_user()
    client = Client()
    client.force_login(user)
    load = os.getloadavg()[0]
    send = _in_process(client)
    cheap = _in_process(Client(), cached_auth.header(user.username))
    kinds = {
        CACHED: _kinds(cheap, in_process=True),
        SESSION: _kinds(send, in_process=True),
    }
    with floors.connect() as psycopg_connection:
        floor = floors.Floor(psycopg_connection, user.pk)
        extra = {name: lambda key, kind=name: floor.send(kind) for name in floors.KINDS}
        django_floor = floors.DjangoFloor(user.pk)
        extra.update(
            {
                name: lambda key, kind=name: django_floor.send(kind)
                for name in floors.DJANGO_KINDS
            }
        )
        for _ in range(WARMUP):
            for firsts, _replays in kinds.values():
                for sender in firsts.values():
                    sender(_key())
            for sender in extra.values():
                sender(None)
        local = _rounds(kinds, extra, ROUNDS, PER_ROUND)
    counted = {auth: _counted(*pair) for auth, pair in kinds.items()}
    profile = _profile(kinds[CACHED][0][KEYED])
    demo = _demo(send)
    statements = _statements(send)
    claim = claim_statement.run()
    served, throughput, cpu = _under_gunicorn(user)
    return (
        "## Idempotency keys: keyed POST vs a bare create view\n\n"
        "The bare view is a DRF `CreateModelMixin` view creating one order, "
        "nothing else (no outbox row, no relay kick); the keyed views are the "
        "same view with `IdempotencyMixin`, in atomic and in lease mode; the "
        "replay resends an atomic key. The DRF floor only authenticates, "
        "checks permissions and answers 201: what every request pays, a "
        "replay included. PostgreSQL with real commits, "
        f"{os.cpu_count()} CPUs shared by client, server and PostgreSQL, "
        f"load average {load:.2f} at the start.\n"
        f"Targets vs the bare view: keyed first request (atomic) <= "
        f"{LATENCY_TARGETS[KEYED]}x median, replay <= "
        f"{LATENCY_TARGETS[REPLAY]}x, requests/s under gunicorn >= "
        f"{THROUGHPUT_TARGETS[KEYED]}x; lease mode reported beside.\n\n"
        f"In-process (Django test client), {ROUNDS} interleaved rounds of "
        f"{PER_ROUND}, each kind of request and each floor in turn for every "
        "key, so all are measured side by side. Two authentications: the "
        "bench's cached user (`bench.cached_auth`: no query) and the session "
        "(two queries a request), which hides the keys' cost in the ratios.\n\n"
        + _in_process_tables(local, counted)
        + "\n\nWhere an atomic first request's time goes (cached user, "
        f"{PROFILED} requests under cProfile, which slows the Python part): "
        "time inside each step, per request:\n\n"
        + profile
        + f"\n\nUnder gunicorn ({WORKERS} sync workers) on loopback, the cached "
        "user's header. Latency: "
        f"{SERVER_ROUNDS} interleaved sequential rounds of {SERVER_PER_ROUND}, "
        f"a new TCP connection each; throughput: {CLIENTS} concurrent clients "
        f"x {PER_CLIENT} requests per kind, in {PASSES} interleaved passes:\n\n"
        + _server_table(served, throughput)
        + "\n\n"
        + _cpu_table(cpu, throughput)
        + "\n\n### Demo-shaped: the demo's order view with and without the mixin\n\n"
        f"`POST /api/orders/` in-process, {ROUNDS} interleaved rounds of "
        f"{PER_ROUND}. Both views do the demo's work: the order, its "
        "`order.created` outbox row and the relay kick on commit; the baseline "
        "is the same view without the mixin.\n"
        "Target: keyed first request <= 1.3x baseline median.\n\n"
        + _latency_table(demo, base="baseline", targets={"keyed": 1.3})
        + "\n\n### The record's statements: hand-written vs the ORM\n\n"
        "`idempotency.querysets` writes the replay read, the completion and "
        "the locked read once per connection and converts the read row "
        "itself; `bench.keys_orm` sends the same statements through "
        "`first()`, `update()` and `select_for_update()` (the claim is the "
        "same hand-written INSERT in both). The same keyed view "
        f"(atomic) in-process, {STATEMENT_ROUNDS} rounds of {PER_ROUND} "
        "alternating the two, each round's first request then its replay:\n\n"
        + _latency_table(statements, base=HAND_WRITTEN, targets={})
        + "\n\n"
        + claim
        + "\n"
    )


# The record's statements, hand-written against the ORM's (bench.keys_orm).
STATEMENT_ROUNDS = 20
HAND_WRITTEN = "hand-written, first request"
STATEMENT_KINDS = {
    HAND_WRITTEN: IdempotencyRecordQuerySet,
    "ORM, first request": OrmRecordQuerySet,
}


def _statements(send):
    """Samples (ns) of keyed requests with each queryset, alternated per round."""
    manager = IdempotencyRecord.objects
    samples: dict[str, list[int]] = {}
    try:
        for number in range(STATEMENT_ROUNDS):
            kinds = list(STATEMENT_KINDS.items())
            for name, queryset in kinds if number % 2 else kinds[::-1]:
                manager._queryset_class = queryset
                replay = name.replace("first request", "replay")
                keys = [_key() for _ in range(PER_ROUND)]
                for key in keys:
                    samples.setdefault(name, []).append(send(FIRSTS[KEYED], key))
                for key in keys:
                    samples.setdefault(replay, []).append(send(FIRSTS[KEYED], key))
    finally:
        manager._queryset_class = IdempotencyRecordQuerySet
    return samples


def _bench_user():
    user, _ = get_user_model().objects.get_or_create(username="bench")
    # The server's hasher (bench.idempotency_settings), set without it here.
    # A fixed salt: a new hash would log out the sessions of a run already
    # going on in the same database.
    password = MD5PasswordHasher().encode(PASSWORD, "bench")
    if user.password != password:
        user.password = password
        user.save(update_fields=["password"])
    return user


def _key():
    return str(uuid.uuid4())


def _kinds(send, *, in_process=False):
    """The first requests (name -> sender of a key), and the replays (name ->
    the first request whose keys they resend, and their sender). In-process
    adds the atomic first request without the replay read, and a lease
    replay."""
    firsts = {
        name: _sender(send, path, keyed=name in KEYED_PATHS)
        for name, path in FIRSTS.items()
    }
    replays = {REPLAY: (KEYED, firsts[KEYED])}
    if in_process:
        firsts[CLAIM_ONLY] = lambda key: _without_replay_read(send, key)
        replays[LEASE_REPLAY] = (LEASED, firsts[LEASED])
    return firsts, replays


def _sender(send, path, *, keyed):
    return lambda key: send(path, key if keyed else None)


def _without_replay_read(send, key):
    """An atomic first request with the replay read switched off."""
    replay_at_one_read = claims._replay_at_one_read
    claims._replay_at_one_read = lambda claim, records: None
    try:
        return send(FIRSTS[KEYED], key)
    finally:
        claims._replay_at_one_read = replay_at_one_read


def _rounds(kinds, extra, rounds, per_round):
    """Samples (ns) by authentication and kind, and of the ``extra`` senders:
    each kind of first request in turn, ``per_round`` times, then a replay
    of each authentication's keys. Every keyed request has a key of
    its own: with one user, two kinds sharing a key would make one a replay."""
    samples: dict[str, dict[str, list[int]]] = {auth: {} for auth in kinds}
    samples[""] = {name: [] for name in extra}
    for _ in range(rounds):
        sent: dict[tuple[str, str], list[str]] = {}
        for _ in range(per_round):
            for auth, (firsts, _replays) in kinds.items():
                for name, sender in firsts.items():
                    key = _key()
                    sent.setdefault((auth, name), []).append(key)
                    samples[auth].setdefault(name, []).append(sender(key))
            for name, sender in extra.items():
                samples[""][name].append(sender(None))
        for auth, (_firsts, replays) in kinds.items():
            for name, (first, sender) in replays.items():
                for key in sent[auth, first]:
                    samples[auth].setdefault(name, []).append(sender(key))
    return samples


PROFILED = 500
# (module, function, what it is): the steps of an atomic first request.
PROFILE_STEPS = (
    (claims, "execute", "the keys' whole part (the view included)"),
    (claims, "_replay_at_one_read", "the replay read: one SELECT, finding nothing"),
    (querysets, "claim", "BEGIN and the claim's INSERT"),
    (database_base, "_savepoint", "SAVEPOINT before the view"),
    (rendering, "produce", "the view: validate, INSERT the order, render"),
    (querysets, "complete", "the completion UPDATE"),
    (database_base, "_savepoint_commit", "RELEASE after the view"),
    (database_base, "commit", "COMMIT"),
    (fingerprint, "compute", "the request's fingerprint"),
    (responses, "keep", "what is kept of the answer"),
)


def _profile(send) -> str:
    """Milliseconds per request in each step of ``send``'s atomic first requests."""
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [send(_key()) for _ in range(PROFILED)])
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for module, name, what in PROFILE_STEPS:
        seconds = sum(
            cumulative
            for (filename, _line, function), (_c, _n, _t, cumulative, _callers) in (
                stats.items()
            )
            if function == name and filename == module.__file__
        )
        rows.append(
            (what, f"`{module.__name__}.{name}`", f"{seconds * 1e3 / PROFILED:.3f}")
        )
    return table(("step", "function", "ms per request"), rows)


def _counted(firsts, replays):
    """Statements the DRF floor, each first request and each replay send,
    counted."""
    counts = {}
    for name in (FLOOR, BARE, KEYED, LEASED):
        with CaptureQueriesContext(connection) as queries:
            firsts[name](_key())
        counts[name] = len(queries.captured_queries)
    for name, (first, sender) in replays.items():
        key = _key()
        firsts[first](key)
        with CaptureQueriesContext(connection) as queries:
            sender(key)
        counts[name] = len(queries.captured_queries)
    return counts


def _demo(send):
    for _ in range(WARMUP):
        send("/baseline/orders/")
        send("/api/orders/", _key())
    samples = {"baseline": [], "keyed": [], "replay": []}
    for _ in range(ROUNDS):
        keys = [_key() for _ in range(PER_ROUND)]
        for key in keys:
            samples["baseline"].append(send("/baseline/orders/"))
            samples["keyed"].append(send("/api/orders/", key))
        for key in keys:
            samples["replay"].append(send("/api/orders/", key))
    return samples


def _in_process(client, authorization=None):
    def send(path, key=None):
        headers = {"Idempotency-Key": key} if key else {}
        if authorization:
            headers["Authorization"] = authorization
        started = time.perf_counter_ns()
        response = client.post(
            path, BODY, content_type="application/json", headers=headers
        )
        elapsed = time.perf_counter_ns() - started
        if response.status_code != 201:
            raise RuntimeError(f"{path} answered {response.status_code}")
        return elapsed

    return send


def _under_gunicorn(user):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.idempotency_settings"}
    with processes.gunicorn(env, workers=WORKERS) as port:
        send = _over_http(port, cached_auth.header(user.username))
        for _ in range(WARMUP // 2):
            for name, path in FIRSTS.items():
                send(path, _key() if name in KEYED_PATHS else None)
        latency = _rounds({CACHED: _kinds(send)}, {}, SERVER_ROUNDS, SERVER_PER_ROUND)[
            CACHED
        ]
        completed = [_key() for _ in range(CLIENTS * PER_CLIENT // PASSES)]
        for key in completed:
            send(FIRSTS[KEYED], key)
        seconds = dict.fromkeys([*FIRSTS, REPLAY], 0.0)
        cpu = {name: dict.fromkeys(CPU_PARTS, 0.0) for name in seconds}
        servers = _server_processes()
        for _ in range(PASSES):
            for name, path in [*FIRSTS.items(), (REPLAY, FIRSTS[KEYED])]:
                if name == REPLAY:
                    keys = completed
                elif name in KEYED_PATHS:
                    keys = [_key() for _ in completed]
                else:
                    keys = [None] * len(completed)
                before = processes.cpu_seconds(servers)
                client = time.process_time()
                seconds[name] += _seconds(send, path, keys)
                cpu[name][CLIENT] += time.process_time() - client
                for part, used in processes.cpu_seconds(servers).items():
                    cpu[name][part] += used - before[part]
        sent = PASSES * len(completed)
    rates = {name: sent / total for name, total in seconds.items()}
    return latency, rates, _per_request(cpu, sent, seconds)


# Where a request's CPU goes under gunicorn: the server's processes, the
# database's, and the client threads (this process).
SERVER = "Django/gunicorn"
POSTGRES = "PostgreSQL"
CLIENT = "client"
CPU_PARTS = (SERVER, POSTGRES, CLIENT)
# Their CPU seconds together over the bursts' wall time.
CORES = "cores busy"


def _server_processes():
    """Tests of a process for the server's parts: gunicorn (this process's
    child and its workers) and PostgreSQL (the bench database's backends and
    the server's own background processes, not other databases' backends:
    the machine's PostgreSQL is shared). Both keep their processes through
    the passes: the workers hold their connections (``CONN_MAX_AGE=None``)."""
    usage = processes.cpu_usage()
    master = {process.pid for process in usage if process.parent == os.getpid()}
    gunicorn = master | {process.pid for process in usage if process.parent in master}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "OR backend_type <> 'client backend'"
        )
        postgres = {pid for (pid,) in cursor.fetchall()}
    return {
        SERVER: lambda process: process.pid in gunicorn,
        POSTGRES: lambda process: process.pid in postgres,
    }


def _per_request(cpu, sent, seconds):
    """Milliseconds of CPU per request by kind and part, and the cores the
    parts kept busy together during the kind's bursts."""
    return {
        name: {
            **{part: used * 1e3 / sent for part, used in parts.items()},
            CORES: sum(parts.values()) / seconds[name],
        }
        for name, parts in cpu.items()
    }


def _over_http(port, authorization):
    def send(path, key=None):
        headers = {"Content-Type": "application/json", "Authorization": authorization}
        if key:
            headers["Idempotency-Key"] = key
        return clients.timed_post(port, path, BODY, headers, expect=201)

    return send


def _seconds(send, path, keys):
    """How long CLIENTS threads take to send one request per key, shared out."""
    shares = [keys[n::CLIENTS] for n in range(CLIENTS)]
    return clients.seconds_for(shares, lambda key: send(path, key))


def _verdict(ratio, target, *, at_least=False):
    if target is None:
        return ""
    met = ratio >= target if at_least else ratio <= target
    sign = ">=" if at_least else "<="
    return f"{sign} {target}x: {'met' if met else 'missed'}"


def _in_process_tables(local, counted) -> str:
    median = {
        auth: {n: median_ms(v) for n, v in kinds.items()}
        for auth, kinds in local.items()
    }
    psycopg = median[""]
    parts = []
    for auth, title in ((CACHED, "Cached user"), (SESSION, "Session")):
        parts.append(
            f"{title}:\n\n"
            + _latency_table(
                local[auth], targets=LATENCY_TARGETS if auth == CACHED else {}
            )
        )
    parts.append(
        "The floors, sent by psycopg on one connection in the same rounds "
        "(`bench.floors`: the statements alone, no Django), then the same "
        "statements through Django's own cursor and `transaction.atomic()`, "
        "what any Django code pays for them:\n\n"
        + _latency_table(local[""], base=floors.ORDER_INSERT, targets={})
    )
    statements = counted[CACHED]
    parts.append(
        "Statements each first request sends, counted (the floors' are "
        f"5 in both modes): bare view {statements[BARE]}, keyed atomic "
        f"{statements[KEYED]} (the replay read, BEGIN, the claim, SAVEPOINT, "
        "the order, the completion, RELEASE, COMMIT), keyed lease "
        f"{statements[LEASED]} (the replay read, the claim in autocommit, "
        "BEGIN, the order, the completion, COMMIT)."
    )
    rows = []
    overheads = (
        (KEYED, floors.ATOMIC, floors.DJANGO_ATOMIC, floors.KEYS_ATOMIC),
        (LEASED, floors.LEASE, floors.DJANGO_LEASE, floors.KEYS_LEASE),
    )
    bounds = []
    for name, floor, django_floor, keys_floor in overheads:
        floor_overhead = psycopg[floor] - psycopg[floors.ORDER_INSERT]
        django_overhead = psycopg[django_floor] - psycopg[floors.DJANGO_ORDER_INSERT]
        keys_overhead = psycopg[keys_floor] - psycopg[floors.ORDER_INSERT]
        for auth in (CACHED, SESSION):
            overhead = median[auth][name] - median[auth][BARE]
            ratio = overhead / floor_overhead
            rows.append(
                (
                    f"{name}, {auth}",
                    f"{overhead:.3f}",
                    f"{floor_overhead:.3f}",
                    f"{ratio:.2f}x",
                    _verdict(ratio, OVERHEAD_TARGETS[name]),
                    f"{django_overhead:.3f}",
                    f"{overhead / django_overhead:.2f}x",
                    f"{keys_overhead:.3f}",
                    f"{overhead / keys_overhead:.2f}x",
                )
            )
        bounds.append(
            f"{name}: its statements alone cost {keys_overhead:.3f} ms over the "
            f"order INSERT, {keys_overhead / floor_overhead:.2f}x the floor's "
            f"overhead (target {OVERHEAD_TARGETS[name]}x)"
        )
    parts.append(
        "Keyed overhead (keyed median - bare median) over the psycopg floor's "
        "(its statements - the autocommit order INSERT), over the same "
        "floor sent through Django's cursor, and over the keys' own "
        "statements sent by psycopg (the floor's, plus the replay read and, "
        "in atomic mode, the view's SAVEPOINT and RELEASE):\n\n"
        + table(
            (
                "request",
                "overhead ms",
                "floor overhead ms",
                "ratio",
                "target",
                "Django-cursor floor overhead ms",
                "ratio to it",
                "keys' statements overhead ms",
                "ratio to them",
            ),
            rows,
        )
    )
    replay_floor = psycopg[floors.READ] + median[CACHED][FLOOR]
    parts.append(
        "What the statements alone leave for the Python around them: the "
        "keys' statements, sent by psycopg with no Python of ours; "
        + "; ".join(bounds)
        + ". For a replay, the DRF floor and one indexed SELECT by psycopg: "
        f"{replay_floor:.3f} ms, "
        f"{replay_floor / median[CACHED][BARE]:.2f}x the bare view (target "
        f"{LATENCY_TARGETS[REPLAY]}x)."
    )
    rows = []
    for auth in (CACHED, SESSION):
        for name in (REPLAY, LEASE_REPLAY):
            extra = median[auth][name] - median[auth][FLOOR]
            selects = extra / psycopg[floors.READ]
            floor_count, replay_count = counted[auth][FLOOR], counted[auth][name]
            rows.append(
                (
                    f"{name}, {auth}",
                    f"{extra:.3f}",
                    f"{selects:.1f}",
                    f"{replay_count - floor_count} ({replay_count} - {floor_count})",
                    _verdict(selects, REPLAY_SELECTS_TARGET),
                )
            )
    parts.append(
        "Replay - DRF floor, in time and in indexed SELECTs (the psycopg "
        f"SELECT's median, {psycopg[floors.READ]:.3f} ms), and in statements "
        "counted (replay - floor). A replay is one SELECT in both modes:\n\n"
        + table(("replay", "ms", "SELECTs (time)", "statements", "target"), rows)
    )
    read_cost = {
        auth: median[auth][KEYED] - median[auth][CLAIM_ONLY]
        for auth in (CACHED, SESSION)
    }
    parts.append(
        "The replay read's cost on an atomic first request (keyed, atomic - "
        f"keyed without it): {read_cost[CACHED]:+.3f} ms with the cached user, "
        f"{read_cost[SESSION]:+.3f} ms with the session."
    )
    return "\n\n".join(parts)


def _latency_table(samples, *, base=BARE, targets=None):
    targets = LATENCY_TARGETS if targets is None else targets
    reference = median_ms(samples[base])
    rows = []
    for name, values in samples.items():
        ratio = median_ms(values) / reference
        rows.append(
            (
                name,
                f"{median_ms(values):.3f}",
                f"{p95_ms(values):.3f}",
                f"{ratio:.2f}x",
                _verdict(ratio, targets.get(name)),
            )
        )
    return table(("request", "median ms", "p95 ms", f"vs {base}", "target"), rows)


def _server_table(latency, throughput):
    reference = median_ms(latency[BARE])
    rows = []
    for name, values in latency.items():
        ratio = median_ms(values) / reference
        rate = throughput[name] / throughput[BARE]
        verdicts = [
            _verdict(ratio, LATENCY_TARGETS.get(name)),
            _verdict(rate, THROUGHPUT_TARGETS.get(name), at_least=True),
        ]
        rows.append(
            (
                name,
                f"{median_ms(values):.3f}",
                f"{p95_ms(values):.3f}",
                f"{ratio:.2f}x",
                f"{throughput[name]:.0f}",
                f"{rate:.2f}x",
                "; ".join(verdict for verdict in verdicts if verdict),
            )
        )
    return table(
        (
            "request",
            "median ms",
            "p95 ms",
            f"vs {BARE}",
            "requests/s",
            "vs bare requests/s",
            "target",
        ),
        rows,
    )


def _cpu_table(cpu, throughput):
    reference = sum(cpu[BARE][part] for part in CPU_PARTS)
    rows = []
    for name, used in cpu.items():
        total = sum(used[part] for part in CPU_PARTS)
        rows.append(
            (
                name,
                *(f"{used[part]:.3f}" for part in CPU_PARTS),
                f"{total:.3f}",
                f"{total / reference:.2f}x",
                f"{used[CORES]:.2f}",
            )
        )
    busy = [used[CORES] for used in cpu.values()]
    keyed = sum(cpu[KEYED][part] for part in CPU_PARTS) / reference
    return (
        "Where a request's CPU goes under gunicorn: during each kind's "
        "throughput bursts, the CPU seconds (user and system) used by the "
        "gunicorn processes, by PostgreSQL's (the bench database's backends "
        "and the server's background processes), and by the client threads "
        "(the bench's process), per request served; cores busy is their sum "
        "over the bursts' wall time.\n\n"
        + table(
            (
                "request",
                *(f"{part} ms" for part in CPU_PARTS),
                "total ms",
                f"vs {BARE}",
                CORES,
            ),
            rows,
        )
        + f"\n\nWhat bounds requests/s: the total CPU a request costs. The "
        f"bursts kept {min(busy):.2f}-{max(busy):.2f} of the {os.cpu_count()} "
        "cores busy with these processes alone (other work on the shared "
        "machine took a share of the rest), so a kind's requests/s vs the bare "
        "view's goes as the inverse of its CPU "
        f"per request: keyed, atomic {keyed:.2f}x the CPU, "
        f"1/{keyed:.2f} = {1 / keyed:.2f}x, against "
        f"{throughput[KEYED] / throughput[BARE]:.2f}x the requests/s."
    )
