"""The IDEMPOTENCY settings: the keys' options, and those all four apps share.

The option table, its validators and the settings object's behaviour live in
``idempotency.shared.settings``.
"""

import re
from datetime import timedelta
from urllib.parse import urlsplit

from .shared.settings import (
    AppSettings,
    InvalidSetting,
    Option,
    dotted_callable,
    duration_of_at_least,
    header_names,
    positive_int,
    seconds,
    show,
    string,
)

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Response headers never stored or replayed: they belong to one session.
NEVER_REPLAYED = frozenset({"set-cookie"})


def header_name(value) -> str:
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise InvalidSetting(
            f"is not a valid header name: {show(value)}.",
            "Use a token such as 'Idempotency-Key'.",
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
# The database's lock timeout counts whole milliseconds.
WAIT_FLOOR = timedelta(milliseconds=1)

key_ttl = duration_of_at_least(
    TTL_FLOOR, "A key forgotten sooner is gone before a client's retry arrives."
)
lease = duration_of_at_least(
    LEASE_FLOOR, "A shorter lease lapses while the first attempt still runs."
)
wait = duration_of_at_least(WAIT_FLOOR, "Lock waits count whole milliseconds.")


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
            check_id="idempotency.E012",
        )
    return ttl


def problem_base_uri(value) -> str:
    """An absolute URI, or a path on the API's own host (a relative reference)."""
    value = string(value)
    if not (value.startswith("/") or urlsplit(value).scheme):
        raise InvalidSetting(
            f"must be an absolute URI or a path, not {show(value)}.",
            "For example '/problems/' or 'https://docs.example.com/problems/'.",
        )
    return value


idempotency_settings = AppSettings(
    "IDEMPOTENCY",
    {
        # Request header carrying the key (IETF draft name).
        "HEADER": Option("Idempotency-Key", header_name, "idempotency.E002"),
        # How long a key is remembered; views override it with ``ttl``. At
        # least 60 s, and at least LEASE + WAIT (idempotency.E012).
        "TTL": Option(timedelta(hours=24), key_ttl, "idempotency.E003"),
        # How long a duplicate waits for the first request before 409; at
        # least 1 ms.
        "WAIT": Option(timedelta(seconds=1), wait, "idempotency.E004"),
        # Lease mode: how long a claim is held before a retry may take it; at
        # least 1 s.
        "LEASE": Option(timedelta(seconds=30), lease, "idempotency.E005"),
        # ``(request) -> str | None``: a non-empty scope name, or None for an
        # anonymous client (refused unless the view opts in; then "anonymous").
        "SCOPE_RESOLVER": Option(
            "idempotency.scopes.default_scope", dotted_callable, "idempotency.E006"
        ),
        # ``(status_code) -> bool``: which responses are stored and replayed.
        "STORE_STATUS": Option(
            "idempotency.responses.is_storable", dotted_callable, "idempotency.E007"
        ),
        # Response headers replayed besides Content-Type and Location.
        "REPLAY_HEADERS": Option(
            (), replay_headers, "idempotency.E008", "For example ['ETag']."
        ),
        # Live records allowed per operation in the shared "anonymous" scope.
        "ANONYMOUS_MAX_KEYS": Option(10_000, positive_int, "idempotency.E010"),
        # Base of the problem+json ``type`` URIs. A path is relative to the
        # API's host, where include("idempotency.urls") documents each type.
        "PROBLEM_BASE_URI": Option(
            "/problems/",
            problem_base_uri,
            "idempotency.E011",
        ),
    },
    shape_id="idempotency.E001",
)
