from django.apps import AppConfig, apps
from django.utils.translation import gettext_lazy as _


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    label = "idempotency"
    verbose_name = _("Idempotency")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core.checks import register
        from django.core.signals import setting_changed

        from . import checks, ops, retention
        from .conf import idempotency_settings
        from .models import IdempotencyRecord

        register(checks.check_settings)
        retention.register("idempotency", IdempotencyRecord.objects.purgeable)
        ops.register_panel(ops.idempotency_panel)
        ops.register_series(
            _("keys created"),
            lambda since: ops.hourly_counts(
                IdempotencyRecord.objects, "created_at", since
            ),
        )
        setting_changed.connect(
            idempotency_settings.on_setting_changed, dispatch_uid="idempotency-conf"
        )
        if apps.is_installed("drf_spectacular"):
            # drf-spectacular finds extensions by import; it is optional.
            from . import openapi  # noqa: F401
