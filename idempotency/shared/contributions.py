"""What each app contributes to the shared layer, read off its AppConfig.

An app declares, as dotted paths imported on first use (so declaring them
imports nothing, the admin least of all)::

    class OutboxConfig(AppConfig):
        retention_kinds = {"outbox": ["outbox.ops.published_past_retention"]}
        console_panels = ["outbox.ops.panel"]
        console_series = [(_("events published"), "outbox.ops.published_per_hour")]

- a retention kind: ``name -> [function(now) -> rows safe to delete]``
  (called with ``using=`` too when the purge names a database);
- a console panel: ``function(now) -> console.panels.Panel``;
- a chart series: ``(label, function(since) -> {hour: count})``;
- metric receivers: a list of ``(signal, receiver)`` pairs, connected only
  while ``IDEMPOTENCY["METRICS"]`` is on (``idempotency.shared.metrics``);
- metric gauges: ``function(now) -> metric families``, read at each scrape
  in a transaction the collector opens and rolls back (so they only read,
  and open no transaction of their own).

One rule for duplicates: a contribution is keyed by its name (a kind's name,
a panel's or a series' dotted path) and the first installed app to declare
a name keeps it, as Django does for templates and static files.
"""

from collections.abc import Callable

from django.apps import apps
from django.utils.module_loading import import_string


def retention_kinds() -> dict[str, list[Callable]]:
    """Every retention kind, in INSTALLED_APPS order."""
    declared = _declared("retention_kinds", dict.items)
    return {name: [import_string(path) for path in paths] for name, paths in declared}


def unit_owners() -> dict[str, Callable]:
    """Each unit kind's owner retention function (see ``steps.retention``)."""
    return {
        name: import_string(path) for name, path in _declared("unit_owners", dict.items)
    }


def kept_units() -> list[Callable]:
    """Each app's function returning the units its kept owners still own."""
    declared = _declared("kept_units", lambda paths: [(p, p) for p in paths])
    return [import_string(path) for _name, path in declared]


def console_panels() -> list[Callable]:
    declared = _declared("console_panels", lambda paths: [(p, p) for p in paths])
    return [import_string(path) for _name, path in declared]


def console_series() -> list[tuple[str, Callable]]:
    declared = _declared(
        "console_series", lambda pairs: [(path, label) for label, path in pairs]
    )
    return [(label, import_string(path)) for path, label in declared]


def metric_receivers() -> list[tuple]:
    """Every app's ``(signal, receiver)`` pairs (imports its metrics module)."""
    declared = _declared("metric_receivers", lambda paths: [(p, p) for p in paths])
    return [pair for _name, path in declared for pair in import_string(path)]


def metric_gauges() -> list[Callable]:
    declared = _declared("metric_gauges", lambda paths: [(p, p) for p in paths])
    return [import_string(path) for _name, path in declared]


def _declared(attribute: str, named: Callable) -> list[tuple]:
    """Every app's ``attribute`` as ``(name, value)`` pairs; the first name wins."""
    found: dict = {}
    for config in apps.get_app_configs():
        declared = getattr(config, attribute, None)
        for name, value in named(declared) if declared else ():
            found.setdefault(name, value)
    return list(found.items())
