"""Deprecated: moved to ``idempotency.shared.testing.clock``; this path goes
in 0.3."""

import warnings

from idempotency.shared.testing.clock import *  # noqa: F403
from idempotency.shared.testing.clock import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.clock moved to idempotency.shared.testing.clock; the old "
    "path goes in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
