from django.apps import apps
from django.utils.translation import gettext_lazy as _

from .shared import appconfig


class IdempotencyConfig(appconfig.OnceAppConfig):
    name = "idempotency"
    label = "idempotency"
    verbose_name = _("Idempotency")

    # Wiring and contributions (see .shared.appconfig and .shared.contributions).
    settings_objects = [
        "idempotency.conf.idempotency_settings",
        "idempotency.shared.conf.shared_settings",
    ]
    system_checks = ["idempotency.checks.check_settings"]
    url_checks = [
        "idempotency.checks.check_problem_docs",
        "idempotency.checks.check_ttls",
    ]
    retention_kinds = {"idempotency": ["idempotency.ops.purgeable"]}
    console_panels = ["idempotency.ops.panel"]
    console_series = [(_("keys created"), "idempotency.ops.created_per_hour")]

    def ready(self):
        super().ready()
        if apps.is_installed("drf_spectacular"):
            # drf-spectacular finds extensions by import; it is optional.
            from . import openapi  # noqa: F401
