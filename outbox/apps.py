from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed
from django.utils.translation import gettext_lazy as _


class OutboxConfig(AppConfig):
    name = "outbox"
    label = "outbox"
    verbose_name = _("Outbox")
    default_auto_field = "django.db.models.BigAutoField"

    # Contributions to retention and the console (idempotency.shared.contributions).
    retention_kinds = {"outbox": ["outbox.ops.purgeable"]}
    console_panels = ["outbox.ops.panel"]
    console_series = [(_("events published"), "outbox.ops.published_per_hour")]

    def ready(self):
        from . import checks as outbox_checks
        from .conf import outbox_settings

        checks.register(outbox_checks.check_settings)
        checks.register(outbox_checks.check_publisher)
        checks.register(outbox_checks.check_destination)
        checks.register(outbox_checks.check_relays)
        checks.register(outbox_checks.check_relay_kick)
        checks.register(outbox_checks.check_base_app)
        checks.register(outbox_checks.check_test_publisher, deploy=True)
        setting_changed.connect(
            outbox_settings.on_setting_changed, dispatch_uid="outbox-conf"
        )
