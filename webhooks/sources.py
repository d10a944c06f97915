"""Configured sources: WEBHOOKS["SOURCES"] entries, validated, with verifiers.

A source is built (and validated) on first use and kept until the settings
change. A source that does not validate refuses its deliveries: it is never
built with a secret that would accept a forgery.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.checks import CheckMessage, Warning
from django.core.exceptions import ImproperlyConfigured

from idempotency.shared.settings import Problem, refuse, validate_dict

from .conf import (
    MIN_SECRET_BYTES,
    NEVER_STORED,
    SOURCE_NAME,
    SOURCE_OPTIONS,
    webhooks_settings,
)
from .exceptions import SourceMisconfigured
from .verifiers.base import BaseVerifier

logger = logging.getLogger("webhooks")


@dataclass(frozen=True)
class Source:
    name: str
    verifier: BaseVerifier
    max_body_size: int
    stored_headers: tuple[str, ...]

    def filter_headers(self, headers) -> dict:
        """The allow-listed headers present in the request, by canonical name."""
        return {name: headers[name] for name in self.stored_headers if name in headers}


def validate(name, config) -> tuple[Source | None, Sequence[Problem | CheckMessage]]:
    """Build the source ``name``; return it (None when invalid) and its problems.

    Errors come as ``Problem``; advice that does not stop the source (a short
    secret) as check ``Warning``. The system check and the running server
    both call this, so they agree on what is valid.
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
    verifier = values["VERIFIER"](
        secrets=values["SECRETS"],
        tolerance=values["TOLERANCE"],
        options=values["OPTIONS"],
    )
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
    never = NEVER_STORED | {h.lower() for h in verifier.signature_headers}
    # Content-Type always: Event.data reads the stored body by it.
    wanted = ["Content-Type", *values["HEADERS"], *verifier.headers]
    stored = tuple(dict.fromkeys(h for h in wanted if h.lower() not in never))
    source = Source(
        name=name,
        verifier=verifier,
        max_body_size=values["MAX_BODY_SIZE"],
        stored_headers=stored,
    )
    advice = []
    if min(map(len, verifier.hmac_keys()), default=0) < MIN_SECRET_BYTES:
        advice.append(
            Warning(
                f"{where} has a secret shorter than {MIN_SECRET_BYTES} bytes.",
                hint="A short HMAC key can be guessed offline; use the "
                "provider's generated secret.",
                id="webhooks.W002",
            )
        )
    return source, advice


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
    errors = [problem for problem in problems if isinstance(problem, Problem)]
    if errors or source is None:
        exc = refuse(errors)
        logger.error(
            "webhook source %r is misconfigured; its deliveries are refused. %s",
            name,
            exc,
        )
        raise SourceMisconfigured(str(exc))
    _built[name] = source
    return source


def forget(*, setting, **kwargs) -> None:
    """Rebuild sources after the WEBHOOKS setting changes (``setting_changed``)."""
    if setting == webhooks_settings.namespace:
        _built.clear()
