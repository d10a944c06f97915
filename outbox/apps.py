from django.utils.translation import gettext_lazy as _

from idempotency.shared import appconfig


class OutboxConfig(appconfig.OnceAppConfig):
    name = "outbox"
    label = "outbox"
    verbose_name = _("Outbox")

    # Wiring and contributions (idempotency.shared.appconfig, .contributions).
    settings_objects = ["outbox.conf.outbox_settings"]
    system_checks = [
        "outbox.checks.check_settings",
        "outbox.checks.check_publisher",
        "outbox.checks.check_destination",
        "outbox.checks.check_relays",
        "outbox.checks.check_debezium_database",
        "outbox.checks.check_relay_kick",
        "outbox.checks.check_base_app",
    ]
    deploy_checks = [
        "outbox.checks.check_test_publisher",
        "outbox.checks.check_debezium_capture",
    ]
    retention_kinds = {"outbox": ["outbox.ops.purgeable"]}
    console_panels = ["outbox.ops.panel"]
    console_series = [(_("events published"), "outbox.ops.published_per_hour")]
    metric_receivers = ["outbox.metrics.RECEIVERS"]
    metric_gauges = ["outbox.metrics.gauges"]
