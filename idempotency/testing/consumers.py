"""Deprecated: moved to ``inbox.testing.consumers``; this path goes in 0.3."""

import warnings

from inbox.testing.consumers import *  # noqa: F403
from inbox.testing.consumers import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.consumers moved to inbox.testing.consumers; the old path goes "
    "in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
