"""The options of ``settings.IDEMPOTENCY`` that the shared layer reads itself.

They belong to the keys' dict for the user (one ``IDEMPOTENCY`` setting), and
the keys' settings object lists them too, so ``check`` and the settings page
see one table; this partial view lets the shared layer read them without
importing the keys feature above it.
"""

from datetime import timedelta
from importlib.util import find_spec
from urllib.parse import urlsplit

from .settings import (
    AppSettings,
    InvalidSetting,
    Option,
    boolean,
    duration,
    show,
    string,
)


def problem_base_uri(value) -> str:
    """An absolute URI, or a path on the API's own host (a relative reference)."""
    value = string(value)
    if not (value.startswith("/") or urlsplit(value).scheme):
        raise InvalidSetting(
            f"must be an absolute URI or a path, not {show(value)}.",
            "For example '/problems/' or 'https://docs.example.com/problems/'.",
        )
    if value[-1:].isalnum():
        # Each type slug is appended as is: '/problems' + 'key-missing'.
        raise InvalidSetting(
            f"must end where a type may follow ('/', '#', '='), not {show(value)}: "
            f"its types would read {show(value + 'key-missing')}.",
            f"For example {show(value + '/')}.",
        )
    return value


def metrics_switch(value) -> bool:
    """True or False; True needs prometheus-client, installed by the extra."""
    value = boolean(value)
    # find_spec, not an import: with metrics off nothing loads the package.
    if value and find_spec("prometheus_client") is None:
        raise InvalidSetting(
            "is True, but prometheus-client is not installed.",
            "pip install 'django-once[prometheus]', or set it to False.",
        )
    return value


SHARED_OPTIONS = {
    "PROBLEM_BASE_URI": Option(
        "/problems/",
        problem_base_uri,
        "idempotency.E011",
        doc="Base of the problem+json ``type`` URIs, each type appended as is "
        "(so it ends in ``/``, ``#`` or ``=``). A path is relative to the "
        'API\'s host, where include("idempotency.urls") documents each type.',
    ),
    "METRICS": Option(
        False,
        metrics_switch,
        "idempotency.E014",
        doc="Count every decision and serve Prometheus metrics (needs the "
        "``prometheus`` extra). Off, nothing imports prometheus-client and no "
        "signal has a receiver of ours. See docs/observability.md.",
    ),
    "UNIT_RETENTION": Option(
        timedelta(days=90),
        duration,
        "idempotency.E016",
        doc="How long a finished unit of steps (done or compensated) and its "
        "step log are kept before ``purge_idempotency`` deletes them. At least the "
        "longest retention of a unit's owner (keys' TTL and every steps-mode "
        "view's own ttl, INBOX and WEBHOOKS RETENTION, idempotency.E016): a "
        "unit purged while its owner can still retry would run its steps again.",
    ),
}

shared_settings = AppSettings(
    "IDEMPOTENCY", SHARED_OPTIONS, shape_id="idempotency.E001", partial=True
)
