"""Deprecated: moved to ``webhooks.testing.deliveries``; this path goes in 0.3."""

import warnings

from webhooks.testing.deliveries import *  # noqa: F403
from webhooks.testing.deliveries import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.deliveries moved to webhooks.testing.deliveries; the "
    "old path goes in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
