"""The payment flow of issue 19, killed with SIGKILL at every step boundary.

A keyed ``POST /t/payments/`` (gunicorn, steps mode) charges the fake
provider and captures the payment; a Celery consumer books a shipment with
the fake carrier; another emails a receipt through the fake mailer, which
takes no key (``tests.testapp.payments``, ``tests.testapp.tasks``). One
process dies at one point (``tests.testapp.crashes``): before a step, inside
it between the outside call and its recovery point ("call:"), or after its
recovery point. The client retries, the broker redelivers, and the effects
are counted at the fakes and in the database.

| crash point | charges | refunds | shipments | mails | payments | events |
|---|---|---|---|---|---|---|
| any before:, after: or call: point but call:mail | 1 | 0 | 1 | 1 | 1 | 1 + 1 |
| call:mail (mail sent, its recovery point not) | 1 | 0 | 1 | **2** | 1 | 1 + 1 |
| abandoned, no crash | 1 | 1 | 0 | 0 | 0 | 0 |
| abandoned, call:refund (during the compensation) | 1 | 1 | 0 | 0 | 0 | 0 |

The mailer's second mail is the one window steps cannot close: the call
happened and the process died before storing that it did, and a mailer with
no key cannot tell the second call from a new one (at least once outside;
rule 7 asks every outside call to be keyed or naturally idempotent).
"""

import http.client
import json
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from idempotency.shared.steps.models import UnitRecord
from inbox.models import InboxMessage
from outbox import relay
from outbox.models import OutboxMessage
from outbox.publishers import CeleryTaskPublisher
from tests.conftest import basic_auth
from tests.fakes import fake_services
from tests.testapp.crashes import CRASH_AT, CRASH_ONCE
from tests.testapp.models import Payment

from .processes import REDIS_URL, celery_worker, gunicorn, wait_until

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

SETTINGS = "tests.faults.steps_settings"
TASKS = {
    "payment.captured": "testapp.ship_payment",
    "shipment.booked": "testapp.email_receipt",
}
# Where the keyed request dies (gunicorn's worker), then where each consumer
# does (Celery's pool child).
VIEW_POINTS = [
    "before:charge",
    "call:charge",
    "after:charge",
    "before:capture",
    "call:capture",
    "after:capture",
]
CONSUMER_POINTS = [
    "before:ship",
    "call:ship",
    "after:ship",
    "before:shipped",
    "call:shipped",
    "after:shipped",
    "before:mail",
    "after:mail",
]


@dataclass
class Flow:
    base: str
    queue: str
    fakes: object
    worker: object
    marker: object

    def pay(self, email="buyer@example.com", key="pay-1", timeout=30.0):
        """POST the payment until an answer other than 409 comes back: the
        client retries through a dropped connection and a live lease."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, body = _post(self.base, key, {"amount": 500, "email": email})
            except (ConnectionError, http.client.HTTPException):
                status, body = None, None  # the worker died: retry
            if status not in (None, 409):
                return status, body
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer but {status} in {timeout:.0f} s")
            time.sleep(0.3)

    def publisher(self):
        return CeleryTaskPublisher(tasks=TASKS, queue=self.queue, broker_url=REDIS_URL)

    def consume(self):
        """Relay the events and wait until both consumers applied theirs."""
        publisher = self.publisher()
        relay.drain(publisher=publisher)

        def shipped():
            return (
                applied("testapp.ship")
                and OutboxMessage.objects.filter(type="shipment.booked").exists()
            )

        wait_until(shipped, "the shipment was not booked", worker=self.worker)
        relay.drain(publisher=publisher)
        wait_until(
            lambda: applied("testapp.receipt"),
            "the receipt was not emailed",
            worker=self.worker,
        )

    def counts(self) -> dict:
        return {
            **self.fakes.effects.counts(),
            "payment": Payment.objects.count(),
            "captured": events("payment.captured"),
            "booked": events("shipment.booked"),
        }


def applied(subscriber) -> bool:
    return InboxMessage.objects.filter(
        subscriber=subscriber, state=InboxMessage.State.APPLIED
    ).exists()


def events(event_type) -> int:
    return OutboxMessage.objects.filter(type=event_type).count()


def _post(base, key, body):
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    try:
        connection.request(
            "POST",
            "/t/payments/",
            body=json.dumps(body),
            headers={
                "Authorization": basic_auth("alice"),
                "Content-Type": "application/json",
                "Idempotency-Key": key,
            },
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@contextmanager
def payment_flow(tmp_path, crash_at="", workers=1):
    """The fakes, a gunicorn and ``workers`` Celery workers, all armed to die
    once at ``crash_at``."""
    marker = tmp_path / "crashed"
    queue = f"faults-steps-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        fakes = stack.enter_context(fake_services())
        env = {**fakes.env(), CRASH_AT: crash_at, CRASH_ONCE: str(marker)}
        base = stack.enter_context(gunicorn(settings=SETTINGS, env=env))
        # prefork: the pool replaces a killed child, and the message it held
        # goes back to the queue (reject_on_worker_lost).
        started = [
            stack.enter_context(
                celery_worker(queue, pool="prefork", settings=SETTINGS, **env)
            )
            for _worker in range(workers)
        ]
        yield Flow(base, queue, fakes, started[0], marker)


ONCE_EACH = {
    "charge": 1,
    "refund": 0,
    "shipment": 1,
    "mail": 1,
    "payment": 1,
    "captured": 1,
    "booked": 1,
}


@pytest.mark.parametrize("crash_at", VIEW_POINTS + CONSUMER_POINTS)
def test_a_kill_at_any_step_boundary_leaves_each_effect_once(
    make_user, tmp_path, crash_at
):
    make_user("alice")
    with payment_flow(tmp_path, crash_at) as flow:
        status, body = flow.pay()
        assert status == 201, body
        flow.consume()
        assert flow.marker.exists(), f"nothing died at {crash_at}"
        assert flow.counts() == ONCE_EACH
    # Three units (the request, each consumer's delivery), each done, all
    # serving the one intent of the payment request.
    units = UnitRecord.objects.all()
    assert sorted(unit.kind for unit in units) == ["inbox", "inbox", "keys"]
    assert {unit.state for unit in units} == {UnitRecord.State.DONE}
    assert len({unit.intent for unit in units}) == 1


def test_a_kill_between_the_mail_and_its_recovery_point_mails_twice(
    make_user, tmp_path
):
    """The one window left open: the mailer takes no key, so the redelivery's
    call is a new mail to it. Pinned here, and in the docs' table."""
    make_user("alice")
    with payment_flow(tmp_path, "call:mail") as flow:
        assert flow.pay()[0] == 201
        flow.consume()
        assert flow.marker.exists()
        assert flow.counts() == {**ONCE_EACH, "mail": 2}


@pytest.mark.parametrize("crash_at", ["", "call:refund"])
def test_an_abandoned_payment_refunds_its_charge_exactly_once(
    make_user, tmp_path, crash_at
):
    make_user("alice")
    with payment_flow(tmp_path, crash_at) as flow:
        status, body = flow.pay(email="buyer@flagged.example")
        assert 400 <= status < 500, body
        # Asked again, the given-up request compensates no further.
        assert flow.pay(email="buyer@flagged.example")[0] == status
        assert flow.marker.exists() == bool(crash_at)
        assert flow.counts() == {
            **ONCE_EACH,
            "refund": 1,
            "shipment": 0,
            "mail": 0,
            "payment": 0,
            "captured": 0,
            "booked": 0,
        }
    unit = UnitRecord.objects.get()
    assert unit.state == UnitRecord.State.COMPENSATED


@pytest.mark.parametrize("crash_at", ["", "call:ship"])
def test_two_workers_racing_one_redelivery_ship_and_mail_once(
    make_user, tmp_path, crash_at
):
    """Two workers get copies of the same message at once (a redelivery
    racing the original); with "call:ship", the one that took it dies after
    the carrier booked, and the other takes the lapsed lease over."""
    make_user("alice")
    with payment_flow(tmp_path, crash_at, workers=2) as flow:
        assert flow.pay()[0] == 201
        message = OutboxMessage.objects.get(type="payment.captured")
        # Two copies of the one message, as a redelivery racing the original
        # sends them: the same task id, the same message id.
        with flow.publisher() as publisher:
            publisher.publish(message)
            publisher.publish(message)
        OutboxMessage.objects.filter(pk=message.pk).update(
            state=OutboxMessage.State.PUBLISHED
        )
        flow.consume()
        assert flow.marker.exists() == bool(crash_at)
        assert flow.counts() == ONCE_EACH
        wait_until(
            lambda: InboxMessage.objects.get(subscriber="testapp.ship").duplicates,
            "the second copy was not dropped as a duplicate",
            worker=flow.worker,
        )
        assert flow.counts() == ONCE_EACH
