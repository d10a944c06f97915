"""Deprecated: moved to ``outbox.testing.events``; this path goes in 0.3."""

import warnings

from outbox.testing.events import *  # noqa: F403
from outbox.testing.events import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.events moved to outbox.testing.events; the old path goes "
    "in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
