from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InboxConfig(AppConfig):
    name = "inbox"
    label = "inbox"
    verbose_name = _("Inbox")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core.checks import register
        from django.core.signals import setting_changed

        from idempotency import ops as console
        from idempotency import retention
        from idempotency.conf import as_timedelta

        from . import checks, ops
        from .conf import inbox_settings
        from .models import InboxMessage

        register(checks.check_settings)
        retention.register(
            "inbox",
            lambda now: InboxMessage.objects.purgeable(
                now, as_timedelta(inbox_settings.RETENTION)
            ),
        )
        console.register_panel(ops.panel)
        setting_changed.connect(
            inbox_settings.on_setting_changed, dispatch_uid="inbox-conf"
        )
