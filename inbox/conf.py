"""The INBOX settings dict, read through one settings object."""

from datetime import timedelta

from idempotency.shared.settings import AppSettings, Option, duration

inbox_settings = AppSettings(
    "INBOX",
    {
        # How long a received message id is remembered.
        "RETENTION": Option(timedelta(days=30), duration, "inbox.E002"),
        # The longest a message can come back after its first delivery: broker
        # visibility timeout, Celery retries x backoff cap, a manual redrive.
        # The broker's visibility_timeout is added to the check when larger.
        "REDELIVERY_HORIZON": Option(timedelta(days=7), duration, "inbox.E002"),
    },
    shape_id="inbox.E001",
)
