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

        from . import checks
        from .conf import inbox_settings

        register(checks.check_settings)
        setting_changed.connect(
            inbox_settings.on_setting_changed, dispatch_uid="inbox-conf"
        )
