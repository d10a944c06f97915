"""The WEBHOOKS settings object, and the table of one source's settings."""

import re
from datetime import timedelta

from idempotency.shared.settings import (
    AppSettings,
    InvalidSetting,
    Option,
    dotted_callable,
    duration,
    duration_of_at_least,
    header_names,
    imported,
    mapping,
    positive_int,
    show,
)

from .verifiers.base import BaseVerifier

# Short names for the bundled verifiers; any other value is a dotted path.
VERIFIERS = {
    "github": "webhooks.verifiers.github.GitHubVerifier",
    "stripe": "webhooks.verifiers.stripe.StripeVerifier",
    "standard": "webhooks.verifiers.standard.StandardWebhooksVerifier",
    "hmac": "webhooks.verifiers.hmac.HmacVerifier",
}
# Never stored, whatever a source's allow-list says.
NEVER_STORED = frozenset({"cookie", "authorization", "proxy-authorization"})
# A source name is one URL path segment.
SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Below this many bytes an HMAC key can be guessed offline from one delivery.
MIN_SECRET_BYTES = 16
# The default RETENTION: a source without a signed time states no shorter
# REPLAY_HORIZON unless it says so.
DEFAULT_RETENTION = timedelta(days=30)


def verifier_class(value) -> type:
    """A bundled verifier's short name, or a BaseVerifier subclass (or its path)."""
    if value is None:
        raise InvalidSetting(
            "is missing.", "Use github, stripe, standard, hmac or a dotted path."
        )
    target = imported(VERIFIERS.get(value, value) if isinstance(value, str) else value)
    if not (isinstance(target, type) and issubclass(target, BaseVerifier)):
        raise InvalidSetting(
            f"is not a known verifier: {show(value)}.",
            "Use github, stripe, standard, hmac or a dotted path.",
        )
    return target


def secrets(value) -> tuple[str, ...]:
    """A list of non-empty strings; never a bare string (iterated per character)."""
    if isinstance(value, str | bytes):
        raise InvalidSetting(
            "is a single string; it must be a list of secrets.",
            "Write ['whsec_…'], not 'whsec_…': a string would be used one "
            "character at a time.",
        )
    if not isinstance(value, list | tuple) or not value:
        raise InvalidSetting(
            "must list at least one secret.",
            "A list of secrets, newest first. An unset environment variable "
            "gives [] or ['']: set it.",
        )
    if not all(isinstance(secret, str) and secret.strip() for secret in value):
        raise InvalidSetting(
            "holds an empty or non-string secret.",
            "Every secret is a non-empty string; an unset environment variable "
            "gives ''.",
        )
    for index, secret in enumerate(value):
        if secret != secret.strip():
            # A key with a newline or a space around it never matches the
            # provider's signatures: every delivery would be refused as forged.
            raise InvalidSetting(
                f"holds a secret with whitespace around it (SECRETS[{index}]).",
                "A trailing newline or space, typically from a file or an "
                "environment variable, is part of the key and makes every "
                "signature fail: strip it where the secret is read.",
            )
    return tuple(value)


def duration_in_seconds(value) -> float:
    return duration(value).total_seconds()


stored_headers = header_names(
    never=NEVER_STORED,
    hint="Cookies and Authorization are never stored; remove it.",
    check_id="webhooks.E010",
)


def non_negative_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidSetting(f"must be an integer of 0 or more, not {show(value)}.")
    return value


# What one entry of WEBHOOKS["SOURCES"] may say, with the defaults.
SOURCE_OPTIONS = {
    "VERIFIER": Option(
        None,
        verifier_class,
        "webhooks.E005",
        doc="Short name (see VERIFIERS) or dotted path to a BaseVerifier subclass.",
    ),
    "SECRETS": Option(
        (),
        secrets,
        "webhooks.E006",
        doc="Every secret currently valid, newest first; two during a rotation. "
        "Whitespace around a secret (a newline read from a file) is refused.",
    ),
    "TOLERANCE": Option(
        300,
        duration_in_seconds,
        "webhooks.E007",
        "Providers sign with a clock; 300 is their usual tolerance.",
        doc="Seconds a signed timestamp may lie in the past or the future. "
        "RETENTION must be at least twice it (webhooks.E019): a delivery "
        "verifies that long either side of its signing, and a receipt purged "
        "sooner would let it verify again and run twice.",
    ),
    "REPLAY_HORIZON": Option(
        DEFAULT_RETENTION,
        duration,
        "webhooks.E020",
        "Give seconds or a timedelta, at most RETENTION.",
        doc="Sources without a signed time (github; hmac without "
        "TIMESTAMP_HEADER): a captured body verifies forever, so one resent "
        "after its receipt is purged (RETENTION after processing) runs again. "
        "This states how long after processing a resent body must still be a "
        "duplicate; the source is refused while RETENTION is shorter "
        "(webhooks.E020). Lower it to accept a shorter RETENTION; ignored where "
        "a signed time bounds replays.",
    ),
    "MIN_SECRET_BYTES": Option(
        MIN_SECRET_BYTES,
        positive_int,
        "webhooks.E017",
        "A number of bytes; 16 unless the provider's secrets are shorter.",
        doc="Fewest bytes each HMAC key must have (Standard Webhooks: decoded). "
        "Lower it only for a provider whose dashboard generates shorter secrets.",
    ),
    "MAX_BODY_SIZE": Option(
        1024 * 1024,
        positive_int,
        "webhooks.E008",
        "A number of bytes.",
        doc="Bodies larger than this many bytes are refused (413) unread "
        "(under WSGI: Django's ASGI handler reads every body before the view).",
    ),
    "HEADERS": Option(
        ("Content-Type", "User-Agent"),
        stored_headers,
        "webhooks.E009",
        "For example ['User-Agent'].",
        doc="Request headers kept on the receipt besides the verifier's own.",
    ),
    "OPTIONS": Option(
        {},
        mapping,
        "webhooks.E011",
        doc="Verifier-specific options (the generic HMAC verifier's header names).",
    ),
}

webhooks_settings = AppSettings(
    "WEBHOOKS",
    {
        "SOURCES": Option(
            {},
            mapping,
            "webhooks.E002",
            "A dict of name to settings.",
            doc="{name: {...}} with the keys of SOURCE_OPTIONS; name is the URL "
            "part. Each source is validated on its own (webhooks.sources), so one "
            "bad source refuses its own deliveries, not every source's.",
        ),
        "ENQUEUE": Option(
            "webhooks.kicks.enqueue",
            dotted_callable,
            "webhooks.E013",
            doc="``(receipt_id) -> None`` run on commit of a new or redelivered "
            "receipt. The default kicks the drain task (webhooks.kicks); "
            '"webhooks.tasks.enqueue" sends one task per receipt instead.',
        ),
        "KICK_INTERVAL": Option(
            timedelta(milliseconds=250),
            duration,
            "webhooks.E016",
            "Give seconds or a timedelta, such as 0.25.",
            doc="A process starts its drains at least this far apart "
            "(webhooks.kicks); a committed receipt waits at most this long for "
            "its drain to start.",
        ),
        "MAX_RETRIES": Option(
            5,
            non_negative_int,
            "webhooks.E014",
            doc="Retries of a failing receipt: it runs at most `MAX_RETRIES` + 1 "
            "times, whether its handlers raise or kill their worker.",
        ),
        "RETRY_BACKOFF_MAX": Option(
            600,
            duration_in_seconds,
            "webhooks.E014",
            doc="The cap of the exponential backoff between a failing receipt's "
            "retries, in seconds.",
        ),
        "STEPS_LEASE": Option(
            timedelta(minutes=5),
            # As the inbox's: a lease of a moment would let a second worker
            # run the same steps while the first is still calling out.
            duration_of_at_least(
                timedelta(seconds=1), "Give at least a second, longer than a step."
            ),
            "webhooks.E014",
            "Give seconds or a timedelta, longer than the slowest step.",
            doc="How long a worker running a receipt's steps handlers holds it "
            "before a retry may take it over; each step's recovery point "
            "renews it.",
        ),
        "RETENTION": Option(
            DEFAULT_RETENTION,
            duration,
            "webhooks.E012",
            "Give seconds or a timedelta.",
            doc="How long processed or skipped receipts (and rejection counts) "
            "are kept: longer than any provider's manual replay window. Each "
            "source refuses a shorter one than its provider's retries "
            "(webhooks.E018), twice its TOLERANCE (E019) or its REPLAY_HORIZON "
            "(E020), and so does the purge.",
        ),
    },
    shape_id="webhooks.E001",
)
