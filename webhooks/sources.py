"""Configured sources: WEBHOOKS["SOURCES"] entries, validated, with verifiers.

A source is built (and validated) on first use and kept until the settings
change. A source that does not validate refuses its deliveries: it is never
built with a secret that would accept a forgery, nor with a RETENTION that
would purge its receipts while a delivery can still verify again.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

from idempotency.shared import storable
from idempotency.shared.settings import Problem, refuse, seconds, validate_dict

from .conf import NEVER_STORED, SOURCE_NAME, SOURCE_OPTIONS, webhooks_settings
from .exceptions import SourceMisconfigured
from .verifiers.base import BaseVerifier

logger = logging.getLogger("webhooks")


@dataclass(frozen=True)
class Source:
    name: str
    verifier: BaseVerifier
    max_body_size: int
    stored_headers: tuple[str, ...]
    # The replays it accepts: None where a signed time refuses them after
    # TOLERANCE; else how long after processing a resent body stays a
    # duplicate (REPLAY_HORIZON, at most RETENTION).
    replay_horizon: timedelta | None = None

    def filter_headers(self, headers) -> dict:
        """The allow-listed headers present in the request, by canonical name.

        Unsigned text: a NUL in one (which jsonb refuses) is escaped, never a
        500 for a signed body; NUL and its escape read alike as a
        Content-Type, so ``Event.data`` still reads the body as intake did.
        """
        return {
            name: storable.text(headers[name])
            for name in self.stored_headers
            if name in headers
        }


def validate(name, config) -> tuple[Source | None, Sequence[Problem]]:
    """Build the source ``name``; return it (None when invalid) and its problems.

    The system check and the running server both call this, so they agree
    on what is valid. Reads RETENTION: call it once WEBHOOKS validates.
    """
    where = f"WEBHOOKS['SOURCES'][{name!r}]"
    if not isinstance(name, str) or not SOURCE_NAME.match(name):
        return None, [
            Problem(
                where,
                "needs a slug name.",
                "webhooks.E003",
                "Lowercase letters, digits, '-' and '_'.",
            )
        ]
    values, problems = validate_dict(
        where,
        config,
        SOURCE_OPTIONS,
        shape_id="webhooks.E003",
        unknown_id="webhooks.E004",
    )
    if problems:
        return None, problems
    try:
        verifier = values["VERIFIER"](
            secrets=values["SECRETS"],
            tolerance=values["TOLERANCE"],
            options=values["OPTIONS"],
        )
    except (TypeError, ValueError, ImproperlyConfigured) as exc:
        # A verifier may refuse its options when made, as the publishers do:
        # the source is refused, never a crash of the check or the intake.
        return None, [
            Problem(
                where,
                "is refused by its verifier.",
                "webhooks.E011",
                f"{type(exc).__name__}: {exc}",
            )
        ]
    problems = [
        Problem(
            where,
            f"{problem}.",
            "webhooks.E011",
            "See the verifier's documentation in the README.",
        )
        for problem in verifier.check()
    ]
    if problems:
        return None, problems
    problems = [
        *_short_secrets(where, verifier, values["MIN_SECRET_BYTES"]),
        *_short_retention(where, verifier, values["REPLAY_HORIZON"]),
    ]
    if problems:
        return None, problems
    never = NEVER_STORED | {h.lower() for h in verifier.signature_headers}
    # Content-Type always: Event.data reads the stored body by it.
    wanted = ["Content-Type", *values["HEADERS"], *verifier.headers]
    stored = tuple(dict.fromkeys(h for h in wanted if h.lower() not in never))
    return Source(
        name=name,
        verifier=verifier,
        max_body_size=values["MAX_BODY_SIZE"],
        stored_headers=stored,
        replay_horizon=None if verifier.signs_time else values["REPLAY_HORIZON"],
    ), []


def _short_secrets(where, verifier, min_bytes) -> list[Problem]:
    if min(map(len, verifier.hmac_keys()), default=0) >= min_bytes:
        return []
    return [
        Problem(
            f"{where}['SECRETS']",
            f"holds a secret shorter than {min_bytes} bytes.",
            "webhooks.E017",
            "A short HMAC key can be guessed offline from one delivery; use "
            "the provider's generated secret, or lower MIN_SECRET_BYTES if "
            "its dashboard generates shorter ones.",
        )
    ]


def _short_retention(where, verifier, replay_horizon) -> list[Problem]:
    """Why RETENTION would purge a receipt this source can still be sent again."""
    retention = webhooks_settings.RETENTION
    problems = []
    if retention < verifier.retry_horizon:
        problems.append(
            Problem(
                where,
                f"needs RETENTION of {seconds(verifier.retry_horizon)} or more.",
                "webhooks.E018",
                f"RETENTION is {seconds(retention)}, but the provider resends a "
                f"delivery for up to {seconds(verifier.retry_horizon)}: a "
                "receipt purged sooner lets a late retry run its plain handlers "
                "twice (steps handlers only while UNIT_RETENTION keeps the unit).",
            )
        )
    if verifier.signs_time:
        window = 2 * timedelta(seconds=verifier.tolerance)
        if retention < window:
            problems.append(
                Problem(
                    where,
                    f"needs RETENTION of {seconds(window)} (2 x TOLERANCE).",
                    "webhooks.E019",
                    f"RETENTION is {seconds(retention)}. A delivery verifies for "
                    "TOLERANCE either side of its signed time; a receipt purged "
                    "sooner lets it verify again and run twice. Raise RETENTION "
                    "or lower TOLERANCE.",
                )
            )
    elif retention < replay_horizon:
        problems.append(
            Problem(
                where,
                "has a REPLAY_HORIZON longer than RETENTION.",
                "webhooks.E020",
                f"REPLAY_HORIZON is {seconds(replay_horizon)}, RETENTION "
                f"{seconds(retention)}. This source signs no time: "
                "a captured body resent after its receipt is purged runs again. "
                "Keep receipts longer, or state the REPLAY_HORIZON you accept.",
            )
        )
    return problems


_built: dict[str, Source] = {}


def get(name: str) -> Source | None:
    """The configured source called ``name``, or None when there is none.

    Raises ``SourceMisconfigured`` (and logs why) when its settings would
    weaken verification.
    """
    try:
        return _built[name]
    except KeyError:
        pass
    try:
        config = webhooks_settings.SOURCES.get(name)
    except ImproperlyConfigured as invalid:
        # A bad WEBHOOKS value (RETENTION, MAX_RETRIES...) refuses every source;
        # the settings object has logged it, naming every bad value.
        raise SourceMisconfigured(str(invalid)) from invalid
    if config is None:
        return None
    source, problems = validate(name, config)
    if source is None:
        exc = refuse(list(problems))
        logger.error(
            "webhook source %r is misconfigured; its deliveries are refused. %s",
            name,
            exc,
            extra={"source": name},
        )
        raise SourceMisconfigured(str(exc))
    _built[name] = source
    return source


def forget(*, setting, **kwargs) -> None:
    """Rebuild sources after the WEBHOOKS setting changes (``setting_changed``)."""
    if setting == webhooks_settings.namespace:
        _built.clear()


def checked_retention() -> timedelta:
    """RETENTION, refused for the purge while any configured source refuses it.

    A source that does not validate cannot say how long its receipts are
    needed, so it refuses the purge too: better kept a day longer than
    purged while a delivery can still run again.
    """
    retention = webhooks_settings.RETENTION
    problems = [
        problem
        for name, config in webhooks_settings.SOURCES.items()
        for problem in validate(name, config)[1]
    ]
    if problems:
        raise refuse(problems)
    return retention
