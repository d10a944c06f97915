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
        "idempotency.checks.check_schema_class",
    ]
    retention_kinds = {"idempotency": ["idempotency.ops.purgeable"]}
    console_panels = ["idempotency.ops.panel", "idempotency.console.units.panel"]
    console_series = [(_("keys created"), "idempotency.ops.created_per_hour")]
