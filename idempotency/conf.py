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
    duration,
    header_names,
    positive_int,
    show,
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


idempotency_settings = AppSettings(
    "IDEMPOTENCY",
    {
        # Request header carrying the key (IETF draft name).
        "HEADER": Option("Idempotency-Key", header_name, "idempotency.E002"),
        # How long a key is remembered; views override it with ``ttl``.
        "TTL": Option(timedelta(hours=24), duration, "idempotency.E003"),
        # How long a duplicate waits for the first request before 409.
        "WAIT": Option(timedelta(seconds=1), duration, "idempotency.E004"),
        # Lease mode: how long a claim is held before a retry may take it.
        "LEASE": Option(timedelta(seconds=30), duration, "idempotency.E005"),
        # ``(request) -> str | None``; None means anonymous.
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
        **SHARED_OPTIONS,
    },
    shape_id="idempotency.E001",
)
