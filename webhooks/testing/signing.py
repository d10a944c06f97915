"""Sign a delivery for a configured webhook source, as its provider would.

The source's own verifier signs (``BaseVerifier.sign()``, the inverse of its
``verify()``), with the source's first, newest secret and its OPTIONS, so a
provider's scheme is written once, in its verifier. Every bundled verifier
signs; a verifier of one's own does when it implements ``sign()``.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from idempotency.shared import clock

from .. import sources
from ..conf import VERIFIERS
from ..verifiers.base import BaseVerifier, Delivery


class CannotSign(Exception):
    """The kit does not know how this source signs its deliveries."""


@dataclass(frozen=True)
class SignedDelivery:
    """A delivery ready to POST: its exact body bytes and its headers."""

    source: str
    delivery_id: str
    event_type: str
    body: bytes
    headers: dict
    content_type: str = "application/json"


def signer(source: str) -> BaseVerifier:
    """The verifier of ``source``, which signs its deliveries.

    Raises ``CannotSign`` for an unknown source or a verifier without ``sign()``.
    """
    configured = sources.get(source)
    if configured is None:
        raise CannotSign(f"WEBHOOKS['SOURCES'] has no source {source!r}")
    verifier = configured.verifier
    if type(verifier).sign is BaseVerifier.sign:
        raise CannotSign(
            f"source {source!r} uses {type(verifier).__name__}, which has no "
            "sign(); give the verifier a sign(), or give the suite a sign() method"
        )
    return verifier


def verifier_kind(source: str) -> str:
    """How ``source`` verifies: ``github``, ``stripe``, ``standard``, ``hmac``,
    or the dotted path of a verifier of one's own that signs.

    Raises ``CannotSign`` as ``signer()`` does.
    """
    verifier_class = type(signer(source))
    path = f"{verifier_class.__module__}.{verifier_class.__qualname__}"
    names = {dotted: name for name, dotted in VERIFIERS.items()}
    return names.get(path, path)


def sign(
    source: str,
    body: dict | bytes,
    *,
    event_type: str,
    delivery_id: str | None = None,
    occurred_at: datetime | None = None,
) -> SignedDelivery:
    """Sign ``body`` for ``source`` as an ``event_type`` delivery.

    A dict body is the event's JSON object as the provider sends it; the
    source's verifier writes in it the fields it reads the delivery id, the
    event type and the event time from (Stripe: ``id``, ``type``,
    ``created``; Standard Webhooks: ``type``, ``timestamp``). Bytes are sent
    as they are. ``occurred_at`` defaults to now, on the apps' clock.
    """
    verifier = signer(source)
    occurred_at = occurred_at or clock.now()
    if timezone.is_naive(occurred_at):
        # Without USE_TZ, the clock's and the project's datetimes are naive,
        # in TIME_ZONE; a provider's payload says which instant that is.
        occurred_at = timezone.make_aware(occurred_at, timezone.get_default_timezone())
    delivery = Delivery(
        delivery_id=delivery_id or f"once-{uuid.uuid4().hex}",
        event_type=event_type,
        occurred_at=occurred_at,
    )
    payload = _body(verifier, body, delivery)
    # Signed now, whenever the event happened: a retry is signed anew.
    headers = verifier.sign(
        payload, delivery_id=delivery.delivery_id, event_type=event_type
    )
    return SignedDelivery(source, delivery.delivery_id, event_type, payload, headers)


def _body(verifier: BaseVerifier, body: Any, delivery: Delivery) -> bytes:
    if isinstance(body, bytes):
        return body
    return json.dumps(verifier.stamp(dict(body), delivery)).encode()


__all__ = ["CannotSign", "SignedDelivery", "sign", "signer", "verifier_kind"]
