from django.utils.translation import gettext_lazy as _

from idempotency.shared import appconfig


class WebhooksConfig(appconfig.OnceAppConfig):
    name = "webhooks"
    label = "webhooks"
    verbose_name = _("Webhooks")

    # Wiring and contributions (idempotency.shared.appconfig, .contributions).
    settings_objects = ["webhooks.conf.webhooks_settings"]
    # The sources and the drain's kicker are built from WEBHOOKS.
    setting_receivers = ["webhooks.sources.forget", "webhooks.kicks.forget"]
    system_checks = [
        "webhooks.checks.check_settings",
        "webhooks.checks.check_enqueue",
        "webhooks.checks.check_base_app",
        "webhooks.checks.check_stray_handlers",
        "webhooks.checks.check_unhandled_sources",
        "webhooks.checks.check_shared_secrets",
    ]
    retention_kinds = {
        "webhooks": ["webhooks.ops.purgeable_receipts", "webhooks.ops.purgeable_counts"]
    }
    unit_owners = {"webhooks": "webhooks.sources.checked_retention"}
    kept_units = ["webhooks.ops.kept_units"]
    console_panels = ["webhooks.ops.panel"]
    console_series = [(_("receipts received"), "webhooks.ops.received_per_hour")]
    metric_receivers = ["webhooks.metrics.RECEIVERS"]
    metric_gauges = ["webhooks.metrics.gauges"]
