"""Deprecated: moved to ``idempotency.shared.testing.threads``; this path goes
in 0.3."""

import warnings

from idempotency.shared.testing.threads import *  # noqa: F403
from idempotency.shared.testing.threads import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.threads moved to idempotency.shared.testing.threads; the old "
    "path goes in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
