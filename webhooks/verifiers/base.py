"""The verifier contract: declared headers, one constant-time ``verify()``, and
``sign()``, its inverse."""

import hmac
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from idempotency.shared import clock

from .. import bodies

# The reasons a verifier raises ``VerificationFailed`` with, importable here
# with the rest of the verifier contract.
from ..exceptions import (  # noqa: F401
    BAD_SIGNATURE,
    BAD_TIMESTAMP,
    MALFORMED_BODY,
    MALFORMED_HEADER,
    MISSING_HEADER,
    NO_SECRET,
    REASONS,
    REPLAYED_BODY,
    VERIFIER_ERROR,
    VerificationFailed,
)

logger = logging.getLogger("webhooks")

_VISIBLE = re.compile(r"[\x20-\x7e]*")
_IDENTIFIER = re.compile(r"[\x21-\x7e]{1,255}")
_SECONDS = re.compile(r"[0-9]{1,12}")

# The event times a receipt may keep: a day inside Python's datetime range,
# so the stored value reads back in any time zone (PostgreSQL would store
# year 0 or 10000, and every later read of the row would fail).
EARLIEST_EVENT_TIME = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
LATEST_EVENT_TIME = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
# The widest offset a real time zone uses (UTC+14:00, the Line Islands).
MAX_UTC_OFFSET = timedelta(hours=14)


@dataclass(frozen=True)
class Delivery:
    """What a verified request says about itself."""

    delivery_id: str
    event_type: str
    # When the provider says the event happened (not when it signed this
    # attempt: retries re-sign with a new time but describe the same event).
    occurred_at: datetime | None = None


class BaseVerifier:
    """Authenticate one provider's deliveries.

    Subclasses declare the headers they read and implement ``verify()``,
    which returns a ``Delivery`` or raises ``VerificationFailed``. Compare
    signatures with ``matches()`` (constant time).
    """

    # Headers this verifier reads; they are kept on the receipt...
    headers: tuple[str, ...] = ()
    # ...except these, which carry signatures and are never stored.
    signature_headers: tuple[str, ...] = ()
    # Option names the source may set in OPTIONS, with their defaults.
    option_defaults: Mapping = {}
    # Whether the signature covers the delivery id. When it does not, anyone
    # holding one signed delivery can resend its body under a fresh id, so
    # the intake also dedupes on the body's SHA-256. False unless a verifier
    # says otherwise: a forgotten declaration costs an index, not a replay.
    signs_delivery_id: bool = False
    # Whether every resend of one delivery id carries the very same body (a
    # signed id only). Then another body under a seen id is the sender
    # reusing the id for another event, counted as changed-body. Not Stripe:
    # it renders an event again for each attempt (pending_webhooks).
    resends_same_body: bool = False
    # Whether the signature covers a time ``verify()`` holds to ``tolerance``
    # (``timestamp()``). Such a delivery stops verifying TOLERANCE after its
    # signing, so a receipt kept longer stops its replays for good. Without
    # one, a captured body verifies forever and runs again once its receipt
    # is purged: the source must state the REPLAY_HORIZON it accepts. False
    # unless a verifier says otherwise.
    signs_time: bool = False
    # How long the provider goes on resending one delivery by itself (its
    # automatic retries): RETENTION must be at least this (webhooks.E018).
    # Manual resends can come later; the default RETENTION of 30 days is for
    # them.
    retry_horizon: timedelta = timedelta(days=3)
    # Whether a delivery says when its event happened (Delivery.occurred_at),
    # so that handlers can tell an older event from a newer one.
    carries_event_time: bool = False

    def __init__(self, *, secrets: Iterable[str], tolerance: float = 300, options=None):
        if isinstance(secrets, str | bytes):
            # Iterated, a string would give one-character keys: fail closed.
            raise ImproperlyConfigured("secrets must be a list, not a string.")
        self.secrets = tuple(secrets)
        self.tolerance = tolerance
        self.options = {**self.option_defaults, **(options or {})}

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Delivery:
        raise NotImplementedError(
            f"{type(self).__name__} must implement verify(body, headers)."
        )

    def sign(
        self,
        body: bytes,
        *,
        delivery_id: str,
        event_type: str,
        secret: str | None = None,
        timestamp: int | None = None,
    ) -> dict[str, str]:
        """Return the headers the provider sends with ``body``: the inverse of
        ``verify()``, for tests and the proof kit.

        Signed with ``secret`` (by default the first, newest one) at
        ``timestamp`` (Unix seconds; by default now, on the apps' clock). A
        provider that reads the id or the type from the body ignores them here
        (see ``stamp()``).
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement sign(body, ...)."
        )

    def stamp(self, event: dict, delivery: Delivery) -> dict:
        """Return ``event`` with the delivery's id, type and time written where
        ``verify()`` reads them in the body; by default they travel in headers."""
        return event

    def signing(self, secret: str | None, timestamp: int | None) -> tuple[str, str]:
        """The secret and the timestamp (as sent) a ``sign()`` uses."""
        if timestamp is None:
            timestamp = int(clock.now().timestamp())
        return (self.secrets[0] if secret is None else secret), str(timestamp)

    def hmac_keys(self) -> list[bytes]:
        """The keys signatures are computed with, one per secret."""
        return [secret.encode() for secret in self.secrets]

    def check(self) -> list[str]:
        """Return configuration problems (one message each); empty when sound."""
        # str(): a key that is no name (1, None) is reported, not sorted
        # against names (TypeError) nor joined as one.
        unknown = sorted(map(str, set(self.options) - set(self.option_defaults)))
        if unknown:
            return [f"unknown OPTIONS: {', '.join(unknown)}"]
        return []

    def authenticate(self, body: bytes, headers: Mapping[str, str]) -> Delivery:
        """Run ``verify()``; any other error fails closed, never a 500."""
        if not self.secrets:
            raise VerificationFailed(NO_SECRET)
        try:
            delivery = self.verify(body, headers)
        except VerificationFailed:
            raise
        except Exception:
            # A bug or an input nobody foresaw: refuse it and say so in the log.
            logger.exception("%s raised while verifying", type(self).__name__)
            raise VerificationFailed(VERIFIER_ERROR) from None
        if not isinstance(delivery, Delivery):
            raise VerificationFailed(VERIFIER_ERROR)
        # A custom verifier's too: a blank id would make every later delivery
        # without one a duplicate, and what a receipt cannot store a 500.
        if not _storable(delivery.delivery_id) or not delivery.delivery_id.strip():
            raise VerificationFailed(VERIFIER_ERROR, "delivery id malformed")
        if not _storable(delivery.event_type):
            raise VerificationFailed(VERIFIER_ERROR, "event type malformed")
        if delivery.occurred_at is None:
            return delivery
        if not isinstance(delivery.occurred_at, datetime):
            raise VerificationFailed(VERIFIER_ERROR)
        # Every verifier's event time passes here, a custom one's too.
        return replace(delivery, occurred_at=event_time(delivery.occurred_at))

    # Helpers for subclasses.

    @staticmethod
    def header(headers: Mapping[str, str], name: str) -> str:
        """Return a present, printable-ASCII header value, stripped."""
        value = headers.get(name)
        if not value or not value.strip():
            raise VerificationFailed(MISSING_HEADER, f"{name} header missing")
        if not _VISIBLE.fullmatch(value) or len(value) > 8192:
            raise VerificationFailed(MALFORMED_HEADER, f"{name} header malformed")
        return value.strip()

    @staticmethod
    def identifier(value, what: str) -> str:
        """Check an id or event type: 1-255 visible ASCII characters."""
        if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
            raise VerificationFailed(MALFORMED_HEADER, f"{what} malformed")
        return value

    @staticmethod
    def body_identifier(event: dict, key: str, what: str) -> str:
        """Read an id or event type from a signed body (400 when unusable),
        saying whether it is missing or malformed: the sender's fix differs."""
        value = event.get(key)
        if value is None:
            raise VerificationFailed(MALFORMED_BODY, f"{what} missing")
        if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
            raise VerificationFailed(MALFORMED_BODY, f"{what} malformed")
        return value

    def timestamp(self, value: str) -> datetime:
        """Parse Unix seconds and refuse them outside the tolerance, both ways."""
        if not _SECONDS.fullmatch(value):
            raise VerificationFailed(MALFORMED_HEADER, "timestamp malformed")
        signed_at = int(value)
        skew = abs(clock.now().timestamp() - signed_at)
        if skew > self.tolerance:
            raise VerificationFailed(BAD_TIMESTAMP, "timestamp outside tolerance")
        return datetime.fromtimestamp(signed_at, UTC)

    @staticmethod
    def iso_event_time(value) -> datetime | None:
        """Read an ISO 8601 event time from a signed body; None when absent.

        Present but unreadable or out of range is the sender's bug (400):
        stored, it could not be read back, nor order the event.
        """
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > 64:
            raise VerificationFailed(MALFORMED_BODY, "event time malformed")
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise VerificationFailed(MALFORMED_BODY, "event time malformed") from None
        # No offset: taken as UTC, the only reading that needs no guess.
        return event_time(moment if moment.tzinfo else moment.replace(tzinfo=UTC))

    @staticmethod
    def epoch_event_time(value) -> datetime | None:
        """Read an event time in Unix seconds from a signed body; None when absent."""
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise VerificationFailed(MALFORMED_BODY, "event time malformed")
        try:
            moment = datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            raise VerificationFailed(
                MALFORMED_BODY, "event time out of range"
            ) from None
        return event_time(moment)

    @staticmethod
    def matches(expected: Iterable[bytes], candidates: Iterable[bytes]) -> bool:
        """Whether any candidate equals any expected digest (constant time each)."""
        candidates = list(candidates)
        found = False
        for digest in expected:
            for candidate in candidates:
                # No early exit: the time taken says nothing about which matched.
                found |= hmac.compare_digest(digest, candidate)
        return found

    @staticmethod
    def json_object(body: bytes, headers: Mapping[str, str]) -> dict:
        """Read a signed body as the JSON object handlers get as ``event.data``.

        Call it after the signature checks out: a refusal then says the body
        is the sender's bug (400), not a forgery. An object nested deeper than
        a worker reads is refused too (``bodies.intake_json_object``).
        """
        try:
            return bodies.intake_json_object(body, headers.get("Content-Type"))
        except ValueError as exc:
            # Fixed words (bodies.json_object), never the body's own text.
            raise VerificationFailed(MALFORMED_BODY, f"body: {exc}") from None


def _storable(value) -> bool:
    """Whether a receipt can keep ``value`` as its id or event type: at most
    255 printable characters (no NUL, no lone surrogate)."""
    return isinstance(value, str) and len(value) <= 255 and value.isprintable()


def event_time(moment: datetime) -> datetime:
    """Return an event time in UTC if a receipt can keep it; else refuse it (400).

    Naive times are a verifier's bug: it must say which zone it read.
    """
    offset = moment.utcoffset()
    if offset is None:
        raise VerificationFailed(VERIFIER_ERROR, "event time has no time zone")
    if abs(offset) > MAX_UTC_OFFSET:
        raise VerificationFailed(MALFORMED_BODY, "event time offset out of range")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise VerificationFailed(MALFORMED_BODY, "event time out of range") from None
    if not EARLIEST_EVENT_TIME <= moment <= LATEST_EVENT_TIME:
        raise VerificationFailed(MALFORMED_BODY, "event time out of range")
    return moment


def stored_event_time(moment: datetime | None) -> datetime | None:
    """An event time as the database takes it: aware under ``USE_TZ``, else
    naive in ``TIME_ZONE``, as Django keeps every datetime then (SQLite
    refuses an aware one, so every timed delivery would answer 500)."""
    if moment is None or settings.USE_TZ:
        return moment
    return timezone.make_naive(moment, timezone.get_default_timezone())
