from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed
from django.utils.translation import gettext_lazy as _


class InboxConfig(AppConfig):
    name = "inbox"
    label = "inbox"
    verbose_name = _("Inbox")
    default_auto_field = "django.db.models.BigAutoField"

    # Contributions to retention and the console (idempotency.shared.contributions).
    retention_kinds = {"inbox": ["inbox.ops.purgeable"]}
    console_panels = ["inbox.ops.panel"]

    def ready(self):
        from . import checks as inbox_checks
        from .conf import inbox_settings

        checks.register(inbox_checks.check_settings)
        checks.register(inbox_checks.check_base_app)
        checks.register(inbox_checks.check_consumer_tasks)
        setting_changed.connect(
            inbox_settings.on_setting_changed, dispatch_uid="inbox-conf"
        )
