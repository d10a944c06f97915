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

        from idempotency import ops as console
        from idempotency import retention
        from idempotency.conf import as_timedelta

        from . import checks, ops
        from .conf import outbox_settings
        from .models import OutboxMessage

        register(checks.check_settings)
        retention.register(
            "outbox",
            lambda now: OutboxMessage.objects.purgeable(
                now, as_timedelta(outbox_settings.RETENTION)
            ),
        )
        console.register_panel(ops.panel)
        console.register_series(_("events published"), ops.published_per_hour)
        register(checks.check_publisher)
        register(checks.check_destination)
        register(checks.check_relays)
        setting_changed.connect(
            outbox_settings.on_setting_changed, dispatch_uid="outbox-conf"
        )
