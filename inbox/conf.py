"""The INBOX settings dict, read through one settings object."""

from datetime import timedelta

from idempotency.conf import AppSettings

inbox_settings = AppSettings(
    "INBOX",
    defaults={
        # How long a received message id is remembered.
        "RETENTION": timedelta(days=30),
        # The longest a message can come back after its first delivery: broker
        # visibility timeout, Celery retries x backoff cap, a manual redrive.
        # The broker's visibility_timeout is added to the check when larger.
        "REDELIVERY_HORIZON": timedelta(days=7),
    },
)
