"""Deprecated: moved to ``webhooks.testing.signing``; this path goes in 0.3."""

import warnings

from webhooks.testing.signing import *  # noqa: F403
from webhooks.testing.signing import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.signing moved to webhooks.testing.signing; the old path goes "
    "in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
