from celery.signals import worker_init
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _

from idempotency.shared import appconfig


class InboxConfig(appconfig.OnceAppConfig):
    name = "inbox"
    label = "inbox"
    verbose_name = _("Inbox")

    # Wiring and contributions (idempotency.shared.appconfig, .contributions).
    settings_objects = ["inbox.conf.inbox_settings"]
    system_checks = [
        "inbox.checks.check_settings",
        "inbox.checks.check_base_app",
        "inbox.checks.check_consumer_tasks",
    ]
    retention_kinds = {"inbox": ["inbox.ops.purgeable"]}
    unit_owners = {"inbox": "inbox.conf.checked_retention"}
    kept_units = ["inbox.ops.kept_units"]
    console_panels = ["inbox.ops.panel"]
    metric_receivers = ["inbox.metrics.RECEIVERS"]
    metric_gauges = ["inbox.metrics.gauges"]

    def ready(self):
        super().ready()
        # A worker refuses to start with a consumer task that would lose
        # messages: the system checks alone do not stop it.
        worker_init.connect(
            import_string("inbox.checks.refuse_unwired_consumers"),
            dispatch_uid="inbox.refuse_unwired_consumers",
            weak=False,
        )
        # So does a worker whose INBOX settings are refused.
        worker_init.connect(
            import_string("inbox.checks.refuse_refused_settings"),
            dispatch_uid="inbox.refuse_refused_settings",
            weak=False,
        )
