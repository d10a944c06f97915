from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WebhooksConfig(AppConfig):
    name = "webhooks"
    label = "webhooks"
    verbose_name = _("Webhooks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core.checks import register
        from django.core.signals import setting_changed

        from idempotency import ops as console
        from idempotency import retention

        from . import checks, ops, sources
        from .conf import webhooks_settings
        from .models import WebhookReceipt, WebhookRejection

        register(checks.check_settings)
        retention.register(
            "webhooks",
            WebhookReceipt.objects.purgeable,
            WebhookRejection.objects.purgeable,
        )
        console.register_panel(ops.panel)
        console.register_series(_("receipts received"), ops.received_per_hour)
        setting_changed.connect(
            webhooks_settings.on_setting_changed, dispatch_uid="webhooks-conf"
        )
        setting_changed.connect(sources.forget, dispatch_uid="webhooks-sources")
