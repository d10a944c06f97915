"""The OUTBOX settings dict, read through one settings object."""

from datetime import timedelta

from idempotency.conf import AppSettings

CELERY = "celery"
DEBEZIUM = "debezium"
RELAYS = (CELERY, DEBEZIUM)

outbox_settings = AppSettings(
    "OUTBOX",
    defaults={
        # Who reads the table: our Celery relay, or Debezium (CDC on the WAL).
        "RELAY": CELERY,
        # Dotted path to a BasePublisher subclass, and its keyword arguments.
        "PUBLISHER": "outbox.publishers.KombuPublisher",
        "PUBLISHER_OPTIONS": {},
        # Messages claimed per relay transaction.
        "BATCH_SIZE": 500,
        # How long a claim is held before another relay may take the message.
        "LEASE": timedelta(seconds=60),
        # Failed publishes (since the last requeue) before a message is dead.
        # 20 with the backoff below: a broker outage must last about 4.5 hours
        # on average (9 at most) before a waiting message is dead.
        "MAX_ATTEMPTS": 20,
        # Backoff ceiling after attempt n: min(BACKOFF_MAX, BACKOFF_BASE * 2**(n-1));
        # the delay is drawn uniformly below it (full jitter).
        "BACKOFF_BASE": timedelta(seconds=2),
        "BACKOFF_MAX": timedelta(hours=1),
        # Per-aggregate ordering: writers serialize per aggregate and a message
        # waits while an older one of its aggregate is unpublished.
        "ORDERED": False,
        # How long one relay task drains before it returns.
        "TIME_BUDGET": timedelta(seconds=30),
        # Send the relay task after each transaction that recorded an event.
        "KICK_ON_COMMIT": True,
        # How long published rows are kept (unpublished ones never expire).
        "RETENTION": timedelta(days=7),
    },
    import_strings=("PUBLISHER",),
)
