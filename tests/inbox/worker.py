"""The Celery app of the inbox's worker tests: the suite's, plus the consumers
of ``tests.inbox.consumers`` (imported at worker start, after Django's setup,
as a worker imports task modules)."""

from tests.celery import app

__all__ = ["app"]

app.conf.imports = [*app.conf.imports, "tests.inbox.consumers"]
