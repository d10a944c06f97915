"""The demo project: a small shop guarded by django-once."""

from .celery import app as celery_app

__all__ = ["celery_app"]
