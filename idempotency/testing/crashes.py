"""Deprecated: moved to ``idempotency.shared.testing.crashes``; this path goes
in 0.3."""

import warnings

from idempotency.shared.testing.crashes import *  # noqa: F403
from idempotency.shared.testing.crashes import __all__  # noqa: F401

warnings.warn(
    "idempotency.testing.crashes moved to idempotency.shared.testing.crashes; the old "
    "path goes in 0.3.",
    DeprecationWarning,
    stacklevel=2,
)
