"""Checks the other apps register: what they need of the base app and Celery."""

from celery import current_app
from django.apps import apps
from django.core.checks import Error, Warning


def base_app_installed(app_label: str, check_id: str):
    """A check for ``outbox``, ``inbox`` and ``webhooks``: they build on this app."""

    def check(app_configs=None, **kwargs):
        if apps.is_installed("idempotency"):
            return []
        return [
            Error(
                f"The '{app_label}' app needs the 'idempotency' app.",
                hint="Add 'idempotency' to INSTALLED_APPS: it holds the settings, "
                "retention and console all four apps share.",
                id=check_id,
            )
        ]

    return check


def celery_broker_configured(what: str, check_id: str):
    """Warn when ``what`` would send Celery tasks but no broker is configured.

    Celery's default app publishes to amqp://guest@localhost//: tasks sent
    there by a project that never configured Celery go nowhere useful.
    """

    def check(app_configs=None, **kwargs):
        if current_app.conf.broker_url:
            return []
        return [
            Warning(
                f"{what} sends Celery tasks, but no Celery broker is configured.",
                hint="Create the project's Celery app (docs/quickstart.md, 'Events and "
                "webhooks') or set "
                "CELERY_BROKER_URL; Celery's default is amqp://guest@localhost//.",
                id=check_id,
            )
        ]

    return check
