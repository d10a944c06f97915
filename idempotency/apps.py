from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed
from django.utils.translation import gettext_lazy as _


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    label = "idempotency"
    verbose_name = _("Idempotency")
    default_auto_field = "django.db.models.BigAutoField"

    # Contributions to retention and the console (see .shared.contributions).
    retention_kinds = {"idempotency": ["idempotency.ops.purgeable"]}
    console_panels = ["idempotency.ops.panel"]
    console_series = [(_("keys created"), "idempotency.ops.created_per_hour")]

    def ready(self):
        from . import checks as settings_checks
        from .conf import idempotency_settings
        from .shared.conf import shared_settings

        checks.register(settings_checks.check_settings)
        checks.register(settings_checks.check_problem_docs, checks.Tags.urls)
        checks.register(settings_checks.check_ttls, checks.Tags.urls)
        checks.register(settings_checks.check_schema_class, checks.Tags.urls)
        setting_changed.connect(
            idempotency_settings.on_setting_changed, dispatch_uid="idempotency-conf"
        )
        setting_changed.connect(
            shared_settings.on_setting_changed, dispatch_uid="idempotency-shared-conf"
        )
