"""The suite's Celery app, configured from the Django settings (``CELERY_*``),
with the installed apps' tasks; the workers the tests start run it."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

app = Celery("tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
