"""A task module that only a Celery app's own autodiscovery finds: its package
is named explicitly and the module is not called ``tasks``."""

from celery import shared_task


@shared_task(name="outbox_tests.discovered_job")
def discovered_job(**event):
    """Named by a CeleryTaskPublisher test; a worker would run it."""
