from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    label = "idempotency"
    verbose_name = _("Idempotency")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core.checks import register
        from django.core.signals import setting_changed

        from . import checks
        from .conf import idempotency_settings

        register(checks.check_settings)
        setting_changed.connect(
            idempotency_settings.on_setting_changed, dispatch_uid="idempotency-conf"
        )
