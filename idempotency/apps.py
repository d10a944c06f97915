from django.utils.translation import gettext_lazy as _

from .shared import appconfig, metrics


class IdempotencyConfig(appconfig.OnceAppConfig):
    name = "idempotency"
    label = "idempotency"
    verbose_name = _("Idempotency")

    # Wiring and contributions (see .shared.appconfig and .shared.contributions).
    settings_objects = [
        "idempotency.conf.idempotency_settings",
        "idempotency.shared.conf.shared_settings",
    ]
    # The metrics switch follows override_settings too.
    setting_receivers = ["idempotency.shared.metrics.on_setting_changed"]
    system_checks = [
        "idempotency.checks.check_settings",
        "idempotency.checks.check_autocommit",
        "idempotency.checks.check_engines",
        "idempotency.shared.steps.retention.check_retention",
    ]
    url_checks = [
        "idempotency.checks.check_problem_docs",
        "idempotency.checks.check_ttls",
        "idempotency.checks.check_schema_class",
        "idempotency.checks.check_atomic_requests",
    ]
    retention_kinds = {
        "idempotency": ["idempotency.ops.purgeable"],
        "units": ["idempotency.shared.steps.retention.purgeable"],
    }
    unit_owners = {"keys": "idempotency.stepping.owner_retention"}
    console_panels = ["idempotency.ops.panel", "idempotency.console.units.panel"]
    console_series = [(_("keys created"), "idempotency.ops.created_per_hour")]
    metric_receivers = [
        "idempotency.metrics.RECEIVERS",
        "idempotency.prometheus.shared.RECEIVERS",
    ]
    metric_gauges = ["idempotency.metrics.gauges"]

    def ready(self):
        super().ready()
        # The base app connects every app's metric receivers, when metrics are on.
        metrics.sync()
