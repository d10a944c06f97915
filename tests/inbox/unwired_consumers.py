"""A consumer task without the inbox's wiring, for the worker refusal test:
imported only by ``tests.inbox.unwired_worker``, never by the suite (its
system check would refuse the suite's own app)."""

from celery import shared_task

from inbox.api import consumer


@shared_task(acks_late=True, name="inbox_tests.unwired")
@consumer("inbox-tests.unwired")
def unwired(*, payload, headers):
    raise RuntimeError("its message would be acked and lost")
