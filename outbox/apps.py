from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OutboxConfig(AppConfig):
    name = "outbox"
    label = "outbox"
    verbose_name = _("Outbox")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core.checks import register
        from django.core.signals import setting_changed

        from . import checks
        from .conf import outbox_settings

        register(checks.check_settings)
        register(checks.check_publisher)
        register(checks.check_relays)
        setting_changed.connect(
            outbox_settings.on_setting_changed, dispatch_uid="outbox-conf"
        )
