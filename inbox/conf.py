"""The INBOX settings dict, read through one settings object."""

from datetime import timedelta

from celery import current_app
from django.core.exceptions import ImproperlyConfigured
from kombu.transport import get_transport_cls

from idempotency.shared.settings import (
    AppSettings,
    Option,
    duration,
    duration_of_at_least,
    positive_int_up_to,
    seconds,
)

# The floor of RETENTION and REDELIVERY_HORIZON: Redis's default visibility
# timeout, after which a message a lost worker held comes back. An id
# forgotten sooner would let that redelivery run the consumer again.
MIN_HORIZON = timedelta(hours=1)
# More attempts than this is a typo; each one is a Celery retry.
MAX_ATTEMPTS_LIMIT = 100


def redelivery_floor(floor: timedelta):
    """A ``duration`` no shorter than ``floor``, a redelivery's reach."""
    return duration_of_at_least(
        floor,
        "A redelivery can come that late; a shorter duration would "
        "let it run the consumer twice.",
    )


attempts = positive_int_up_to(
    MAX_ATTEMPTS_LIMIT, "After the last attempt the message is dead, for an operator."
)


inbox_settings = AppSettings(
    "INBOX",
    {
        "RETENTION": Option(
            timedelta(days=30),
            redelivery_floor(MIN_HORIZON),
            "inbox.E002",
            doc="How long a received message id is remembered.",
        ),
        "REDELIVERY_HORIZON": Option(
            timedelta(days=7),
            redelivery_floor(MIN_HORIZON),
            "inbox.E002",
            doc="The longest a message can come back after its first delivery: "
            "broker visibility timeout, Celery retries x backoff cap, a manual "
            "redrive. The broker's visibility_timeout is added to the check when "
            "larger.",
        ),
        "MAX_ATTEMPTS": Option(
            5,
            attempts,
            "inbox.E005",
            doc="Runs of a ConsumerTask that raised before its message is dead.",
        ),
        "STEPS_LEASE": Option(
            timedelta(minutes=5),
            duration_of_at_least(
                timedelta(seconds=1), "Give at least a second, longer than a step."
            ),
            "inbox.E002",
            doc="How long a steps consumer holds a delivery before a redelivery "
            "may take it over; each step's recovery point renews it. Longer "
            "than the slowest step.",
        ),
        "RETRY_BACKOFF_MAX": Option(
            timedelta(minutes=10),
            duration,
            "inbox.E002",
            doc="The cap of the exponential backoff between a ConsumerTask's runs.",
        ),
    },
    shape_id="inbox.E001",
)


def visibility_timeout() -> timedelta:
    """The broker's visibility timeout: Redis and SQS redeliver an unacked
    message after it (0 when the broker has none).

    Unset, it is the transport's own default (an hour on Redis), not 0.
    """
    options = current_app.conf.broker_transport_options or {}
    timeout = options.get("visibility_timeout")
    if timeout is None:
        timeout = _transport_default_visibility_timeout()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        return timedelta(0)  # not ours to validate; kombu reports it
    return timedelta(seconds=max(timeout, 0))


def _transport_default_visibility_timeout() -> float:
    try:
        transport = get_transport_cls(current_app.connection_for_write().transport_cls)
    except ImportError:  # a transport whose client is not installed runs nothing
        return 0
    except (KeyError, ValueError):
        # A URL kombu cannot read ("reddis://", a port that is no number)
        # connects nowhere: Celery reports it where it connects, and RETENTION's
        # floor already covers Redis's default.
        return 0
    channel = getattr(transport, "Channel", None)
    # Redis names it visibility_timeout; SQS, default_visibility_timeout.
    for name in ("visibility_timeout", "default_visibility_timeout"):
        value = getattr(channel, name, None)
        if isinstance(value, int | float):
            return value
    return 0


def retry_span() -> timedelta:
    """How late a ConsumerTask's last retry can run: one backoff cap per retry."""
    return (inbox_settings.MAX_ATTEMPTS - 1) * inbox_settings.RETRY_BACKOFF_MAX


def short_retention(retention: timedelta, horizon: timedelta) -> str | None:
    """Why ``retention`` cannot guard redeliveries, or None when it can."""
    timeout = visibility_timeout()
    span = retry_span()
    if retention >= max(horizon, timeout, span):
        return None
    if span > max(horizon, timeout):
        bound = f"MAX_ATTEMPTS - 1 retries x RETRY_BACKOFF_MAX ({seconds(span)})"
        remedy = "Keep ids at least that long, or retry fewer times."
    elif timeout > horizon:
        bound = f"the broker's visibility_timeout ({seconds(timeout)})"
        remedy = "Keep ids at least that long."
    else:
        bound = f"REDELIVERY_HORIZON ({seconds(horizon)})"
        remedy = (
            "Keep ids at least that long, or lower REDELIVERY_HORIZON if "
            "redeliveries cannot come that late."
        )
    return (
        f"INBOX['RETENTION'] ({seconds(retention)}) is shorter than {bound}: "
        f"a message redelivered after its id was purged would run twice. {remedy}"
    )


def checked_retention() -> timedelta:
    """RETENTION, refused when a purge by it would forget ids too soon."""
    retention = inbox_settings.RETENTION
    if why := short_retention(retention, inbox_settings.REDELIVERY_HORIZON):
        raise ImproperlyConfigured(why)
    return retention
