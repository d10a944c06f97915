"""The OUTBOX settings dict, read through one settings object."""

from datetime import timedelta

from idempotency.shared.settings import (
    AppSettings,
    Option,
    boolean,
    duration,
    mapping,
    one_of,
    positive_int,
    positive_int_up_to,
    subclass_of,
)

from .publishers.base import BasePublisher

CELERY = "celery"
DEBEZIUM = "debezium"
RELAYS = (CELERY, DEBEZIUM)
# The most messages one claim leases, as the purge's batches: past
# PostgreSQL's bigint the claim's LIMIT would fail every relay run.
MAX_BATCH_SIZE = 100_000


# Messages per claim.
batch_size = positive_int_up_to(MAX_BATCH_SIZE, "For example 500.")


outbox_settings = AppSettings(
    "OUTBOX",
    {
        "RELAY": Option(
            CELERY,
            one_of(*RELAYS),
            "outbox.E002",
            "'celery' runs our relay; 'debezium' leaves it to CDC.",
            doc="Who reads the table: our Celery relay, or Debezium (CDC on the WAL).",
        ),
        "PUBLISHER": Option(
            "outbox.publishers.KombuPublisher",
            subclass_of(BasePublisher),
            "outbox.E005",
            doc="Dotted path to a BasePublisher subclass.",
        ),
        "PUBLISHER_OPTIONS": Option(
            {},
            mapping,
            "outbox.E005",
            doc="Keyword arguments the PUBLISHER class is made with.",
        ),
        "BATCH_SIZE": Option(
            500,
            batch_size,
            "outbox.E003",
            "For example 500.",
            doc="Messages claimed per relay transaction, at most 100,000.",
        ),
        "LEASE": Option(
            timedelta(seconds=60),
            duration,
            "outbox.E004",
            doc="How long a claim is held before another relay may take the "
            "message; longer than the publisher's wait on the broker "
            "(outbox.E012).",
        ),
        "MAX_ATTEMPTS": Option(
            20,
            positive_int,
            "outbox.E003",
            "For example 20.",
            doc="Failed publishes (since the last requeue) before a message is "
            "dead. 20 with the backoff below: a broker outage must last about "
            "4.5 hours on average (9 at most) before a waiting message is dead.",
        ),
        "BACKOFF_BASE": Option(
            timedelta(seconds=2),
            duration,
            "outbox.E004",
            doc="Backoff ceiling after attempt n: min(BACKOFF_MAX, BACKOFF_BASE * "
            "2**(n-1)); the delay is drawn uniformly below it (full jitter).",
        ),
        "BACKOFF_MAX": Option(
            timedelta(hours=1),
            duration,
            "outbox.E004",
            doc="Cap of the backoff ceiling (see BACKOFF_BASE): no failed message "
            "waits longer before its next attempt.",
        ),
        "ORDERED": Option(
            False,
            boolean,
            "outbox.E007",
            doc="Per-aggregate ordering: writers serialize per aggregate and a "
            "message waits while an older one of its aggregate is unpublished.",
        ),
        "TIME_BUDGET": Option(
            timedelta(seconds=30),
            duration,
            "outbox.E004",
            doc="How long one relay task drains before it returns; one whose "
            "last batch was full sends a fresh task to go on.",
        ),
        "KICK_ON_COMMIT": Option(
            True,
            boolean,
            "outbox.E007",
            doc="Send the relay task after each transaction that recorded an event.",
        ),
        "KICK_INTERVAL": Option(
            timedelta(milliseconds=100),
            duration,
            "outbox.E004",
            doc="A process starts its relay runs at least this far apart "
            "(outbox.kicks); an event waits at most this long for its kick.",
        ),
        "RETENTION": Option(
            timedelta(days=7),
            duration,
            "outbox.E004",
            doc="How long published rows are kept (unpublished ones never expire).",
        ),
    },
    shape_id="outbox.E001",
)
