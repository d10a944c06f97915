"""The Celery app of the worker refusal test: the suite's, plus a consumer
task without the inbox's wiring."""

from tests.celery import app

__all__ = ["app"]

app.conf.imports = [*app.conf.imports, "tests.inbox.unwired_consumers"]
