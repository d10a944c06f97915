"""The metrics switch: the apps' metric receivers are connected while
``IDEMPOTENCY["METRICS"]`` is on, and none while it is off.

Off costs nothing: this module imports no prometheus-client, and an app's
metrics module (which does) is imported only once the switch is on. Serving
the metrics is ``idempotency.prometheus``'s job.
"""

from django.dispatch import Signal

from . import contributions
from .conf import shared_settings

# Every receiver this module connected, to disconnect when the switch goes off.
_connected: list[tuple[Signal, str]] = []


def is_on() -> bool:
    """The switch; a bad value counts as off here (``check`` reports it, and
    the first read of any IDEMPOTENCY option refuses it in the server)."""
    values, _problems = shared_settings.validate()
    return values.get("METRICS", False)


def sync() -> None:
    """Connect every app's metric receivers when metrics are on, none when off."""
    while _connected:
        signal, uid = _connected.pop()
        signal.disconnect(dispatch_uid=uid)
    if not is_on():
        return
    for signal, receiver in contributions.metric_receivers():
        uid = f"once-metrics:{receiver.__module__}.{receiver.__qualname__}"
        signal.connect(receiver, dispatch_uid=uid)
        _connected.append((signal, uid))


def on_setting_changed(*, setting, **kwargs) -> None:
    if setting == "IDEMPOTENCY":
        sync()
