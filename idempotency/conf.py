"""The IDEMPOTENCY settings: the keys' options, and those all four apps share.

The option table, its validators and the settings object's behaviour live in
``idempotency.shared.settings``.
"""

import re
from datetime import timedelta

from .shared.conf import SHARED_OPTIONS
from .shared.settings import (
    AppSettings,
    InvalidSetting,
    Option,
    dotted_callable,
    duration_of_at_least,
    header_names,
    positive_int,
    positive_int_up_to,
    seconds,
    show,
)

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# What every server in front of Django passes on (nginx's ignore_invalid_headers).
_PASSES_SERVERS = re.compile(r"^[0-9A-Za-z-]+$")
# Response headers never stored or replayed: they belong to one session.
NEVER_REPLAYED = frozenset({"set-cookie"})


def header_name(value) -> str:
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise InvalidSetting(
            f"is not a valid header name: {show(value)}.",
            "Use a token such as 'Idempotency-Key'.",
        )
    if not _PASSES_SERVERS.match(value):
        # nginx drops a header named with anything else, runserver and gunicorn
        # one with an underscore, and Django names any it gets with dashes: the
        # key would never be read, and an optional key would leave every
        # request unguarded.
        raise InvalidSetting(
            f"has characters servers drop: {show(value)}.",
            "Use letters, digits and dashes only, as in 'Idempotency-Key'.",
        )
    return value


replay_headers = header_names(
    never=NEVER_REPLAYED,
    hint="Cookies are never stored or replayed; remove it.",
    check_id="idempotency.E009",
)


# Floors (DESIGN rule 12): below them a retry outruns the guarantee.
# A client's retry comes seconds to minutes later: a key must outlive that.
TTL_FLOOR = timedelta(minutes=1)
# An ordinary request outlasts a shorter lease, so a retry would run it again.
LEASE_FLOOR = timedelta(seconds=1)
# The database's lock timeout counts whole milliseconds, in an int: past
# PostgreSQL's ceiling every keyed request failed setting it.
WAIT_FLOOR = timedelta(milliseconds=1)
WAIT_CEILING = timedelta(milliseconds=2**31 - 1)

key_ttl = duration_of_at_least(
    TTL_FLOOR, "A key forgotten sooner is gone before a client's retry arrives."
)
lease = duration_of_at_least(
    LEASE_FLOOR, "A shorter lease lapses while the first attempt still runs."
)
_wait_floor = duration_of_at_least(WAIT_FLOOR, "Lock waits count whole milliseconds.")


def wait(value) -> timedelta:
    delta = _wait_floor(value)
    if delta > WAIT_CEILING:
        raise InvalidSetting(
            f"must be at most {seconds(WAIT_CEILING)}, not {seconds(delta)}.",
            "PostgreSQL's lock_timeout holds at most 2,147,483,647 ms; a "
            "duplicate waits seconds for the first request, not days.",
        )
    return delta


# Each anonymous keyed request counts up to this many live records (LIMIT cap
# + 1): past PostgreSQL's bigint every such request failed in the database.
MAX_ANONYMOUS_KEYS = 1_000_000
anonymous_max_keys = positive_int_up_to(
    MAX_ANONYMOUS_KEYS,
    "Each anonymous keyed request counts up to this many records; for example 10000.",
)


def outlasting_ttl(ttl: timedelta, where: str) -> timedelta:
    """``ttl``, refused when a record could expire while its lease still runs.

    Past its TTL a record is forgotten, even with a live lease: a retry that
    waited out the lease would then run the request a second time.
    """
    needed = idempotency_settings.LEASE + idempotency_settings.WAIT
    if ttl < needed:
        raise InvalidSetting(
            f"{where} is {seconds(ttl)}, under LEASE + WAIT ({seconds(needed)}).",
            "A record must outlive its lease and a duplicate's wait; raise "
            "the TTL or lower IDEMPOTENCY['LEASE'].",
            check_id="idempotency.E013",
        )
    return ttl


def store_status(value):
    """A ``(status_code) -> bool`` policy that stores every success (2xx).

    A success it declined would commit its work with nothing to replay: each
    retry could only be told that the answer is lost.
    """
    policy = dotted_callable(value)
    declined = [status for status in range(200, 300) if not policy(status)]
    if declined:
        shown = ", ".join(str(status) for status in declined[:3])
        more = ", ..." if len(declined) > 3 else ""
        raise InvalidSetting(
            f"declines success statuses: {shown}{more}.",
            "Store every 2xx: its retry must get the answer, not run again. "
            "Decline only statuses that invite a retry (408, 409, 429, 5xx).",
        )
    return policy


idempotency_settings = AppSettings(
    "IDEMPOTENCY",
    {
        "HEADER": Option(
            "Idempotency-Key",
            header_name,
            "idempotency.E002",
            doc="Request header carrying the key (IETF draft name): letters, "
            "digits and dashes only, as servers drop other names.",
        ),
        "TTL": Option(
            timedelta(hours=24),
            key_ttl,
            "idempotency.E003",
            doc="How long a key is remembered; views override it with ``ttl``. "
            "At least 60 s, and at least LEASE + WAIT (idempotency.E013).",
        ),
        "WAIT": Option(
            timedelta(seconds=1),
            wait,
            "idempotency.E004",
            doc="How long a duplicate waits for the first request before 409; "
            "at least 1 ms, at most 2,147,483.647 s (PostgreSQL's lock_timeout).",
        ),
        "LEASE": Option(
            timedelta(seconds=30),
            lease,
            "idempotency.E005",
            doc="Lease mode: how long a claim is held before a retry may take "
            "it; at least 1 s.",
        ),
        "SCOPE_RESOLVER": Option(
            "idempotency.scopes.default_scope",
            dotted_callable,
            "idempotency.E006",
            doc="``(request) -> str | None``: a non-empty scope name, or None for "
            "an anonymous client (refused unless the view opts in; then "
            '"anonymous").',
        ),
        "STORE_STATUS": Option(
            "idempotency.responses.is_storable",
            store_status,
            "idempotency.E007",
            doc="``(status_code) -> bool``: which responses are stored and "
            "replayed. It must store every 2xx. A declined error (>= 400) rolls "
            "the view's work back and a retry runs again; a declined 3xx keeps "
            "the work and the key, and a retry is told the answer was not kept.",
        ),
        "REPLAY_HEADERS": Option(
            (),
            replay_headers,
            "idempotency.E008",
            "For example ['ETag'].",
            doc="Response headers replayed besides Content-Type, Content-Encoding, "
            "Content-Language and Location.",
        ),
        "MAX_STORED_BODY": Option(
            1024 * 1024,
            positive_int,
            "idempotency.E012",
            doc="Largest response body stored, in bytes. A larger answer still "
            "reaches the client and its work is kept; a retry is told it was not "
            "kept.",
        ),
        "ANONYMOUS_MAX_KEYS": Option(
            10_000,
            anonymous_max_keys,
            "idempotency.E010",
            doc='Live records allowed per operation in the shared "anonymous" '
            "scope, at most 1,000,000 (each anonymous keyed request counts them).",
        ),
        **SHARED_OPTIONS,
    },
    shape_id="idempotency.E001",
)
