from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed
from django.utils.translation import gettext_lazy as _


class WebhooksConfig(AppConfig):
    name = "webhooks"
    label = "webhooks"
    verbose_name = _("Webhooks")
    default_auto_field = "django.db.models.BigAutoField"

    # Contributions to retention and the console (idempotency.shared.contributions).
    retention_kinds = {
        "webhooks": ["webhooks.ops.purgeable_receipts", "webhooks.ops.purgeable_counts"]
    }
    console_panels = ["webhooks.ops.panel"]
    console_series = [(_("receipts received"), "webhooks.ops.received_per_hour")]

    def ready(self):
        from . import checks as webhooks_checks
        from . import kicks, sources
        from .conf import webhooks_settings

        checks.register(webhooks_checks.check_settings)
        checks.register(webhooks_checks.check_enqueue)
        checks.register(webhooks_checks.check_base_app)
        setting_changed.connect(
            webhooks_settings.on_setting_changed, dispatch_uid="webhooks-conf"
        )
        setting_changed.connect(sources.forget, dispatch_uid="webhooks-sources")
        setting_changed.connect(kicks.forget, dispatch_uid="webhooks-kicks")
