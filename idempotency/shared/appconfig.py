"""The AppConfig the four apps build on: their checks and settings, declared.

An app declares dotted paths, imported in ``ready()``::

    class OutboxConfig(appconfig.OnceAppConfig):
        settings_objects = ["outbox.conf.outbox_settings"]
        system_checks = ["outbox.checks.check_settings"]

- ``settings_objects``: each forgets its values when ``override_settings``
  changes its dict (``setting_changed``);
- ``setting_receivers``: other ``setting_changed`` receivers (caches built
  from a setting);
- ``system_checks``; ``url_checks`` read the URLconf (``Tags.urls``);
  ``deploy_checks`` run only under ``check --deploy``.

Import this module, not the class, in an app's ``apps.py``: Django takes the
one AppConfig subclass it finds there as the app's, and would find two.
"""

from collections.abc import Mapping, Sequence

from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed
from django.utils.module_loading import import_string


class OnceAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"

    settings_objects: Sequence[str] = ()
    setting_receivers: Sequence[str] = ()
    system_checks: Sequence[str] = ()
    url_checks: Sequence[str] = ()
    deploy_checks: Sequence[str] = ()
    # A unit kind -> the dotted path of a function returning how long its
    # owner's record can still bring a retry (the floor of UNIT_RETENTION).
    unit_owners: Mapping[str, str] = {}
    # Dotted paths of functions returning the records kept whatever their
    # age (a dead inbox row, a failed receipt), annotated with their unit's
    # identity as ``unit`` (units.Identity): a retry may join that unit as
    # long as its owner is kept, so it stays too.
    kept_units: Sequence[str] = ()

    def ready(self):
        for path in self.system_checks:
            checks.register(import_string(path))
        for path in self.url_checks:
            checks.register(import_string(path), checks.Tags.urls)
        for path in self.deploy_checks:
            checks.register(import_string(path), deploy=True)
        for path in self.settings_objects:
            receiver = import_string(path).on_setting_changed
            setting_changed.connect(receiver, dispatch_uid=path)
        for path in self.setting_receivers:
            setting_changed.connect(import_string(path), dispatch_uid=path)
