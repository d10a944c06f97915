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

        from . import checks
        from .conf import webhooks_settings

        register(checks.check_settings)
        setting_changed.connect(
            webhooks_settings.on_setting_changed, dispatch_uid="webhooks-conf"
        )
