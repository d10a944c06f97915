"""The failure cases of webhook handlers, run against the user's own ones.

Deliveries are signed for a configured source (``signing``), POSTed to its
intake URL, and processed in the test's thread as a worker would process
what the intake enqueued (``webhooks.processing.process``), so the user's
registered handlers run exactly as in production.
"""

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

import pytest
from django.conf import settings
from django.db import router
from django.test import Client, TestCase, override_settings
from django.urls import reverse

from idempotency.shared import clock
from idempotency.shared.steps.models import StepRecord, UnitRecord
from idempotency.shared.testing import guarantees as g
from idempotency.shared.testing.clock import controlled_clock
from idempotency.shared.testing.compensations import abandon_after_steps
from idempotency.shared.testing.crashes import (
    AFTER,
    BEFORE,
    commit_points,
    failures_past,
    require_committed_transactions,
)
from idempotency.shared.testing.messages import sent_straight, tasks_sent
from idempotency.shared.testing.steps import (
    die_then_judge,
    fail_then_retry,
    growth,
    kill_after_each_step,
    step_kills,
)

from .. import sources
from ..conf import webhooks_settings
from ..handlers import event_types_handled, handlers_for, runs_steps
from ..models import WebhookReceipt
from ..processing import HandlerFailed, process
from .signing import CannotSign, SignedDelivery, sign, signer, verifier_kind

REDELIVERED_WEBHOOK = (
    "a webhook delivered again with the same delivery id runs its handlers once"
)
CRASHED_WEBHOOK = (
    "a webhook whose worker died while processing it is applied exactly once"
)
_NO_STEP_RUN = (
    "the handlers ran no step: do their outside calls go through event.step()?"
)
COMPENSATED_WEBHOOK = (
    "a steps handler's unit that gives up undoes each completed step's effect "
    "exactly once, last step first, also when its compensation dies midway "
    "and is resumed"
)
CRASHED_STEPS_WEBHOOK = (
    "a steps handler killed right after any of its steps runs each step's "
    "effect once in the end: the redelivered task resumes, repeating nothing"
)
FAILED_WEBHOOK = (
    "a handler whose work fails raises, so the receipt is retried and applied "
    "once in the end: a failure swallowed marks it processed and loses it"
)
FORCED_WEBHOOK = (
    "a processed receipt an operator force-reprocesses runs its handlers "
    "again, and they tolerate the second run: no effect happens twice"
)
STALE_WEBHOOK = "an event older than the state it would overwrite is ignored"
NEWER_WEBHOOK = (
    "an event newer than the state it would overwrite is applied, even when it "
    "arrives after an older one"
)

# How much older the stale event is than the newer one.
STALE_BY = timedelta(hours=1)
# How much older the order case's older event is: a minute, as a provider's
# retry brings it, so a handler dropping events by their age (older than
# half an hour, say) instead of by the state's stamp applies it.
LATE_BY = timedelta(minutes=1)

# Receipt ids the intake enqueued, in order (WEBHOOKS["ENQUEUE"] points at
# collect() while a check runs).
_enqueued: list[int] = []


def collect(receipt_id: int) -> None:
    """The kit's WEBHOOKS["ENQUEUE"]: keep the receipt for the test's worker."""
    _enqueued.append(receipt_id)


@dataclass
class Webhook:
    """A source's event and what its handlers do, as the checks drive them.

    ``body()`` returns a new event (a JSON object as the provider sends it,
    or bytes) for each delivery: create what it refers to, and make each
    distinct (GitHub and HMAC sources dedupe identical bodies too).
    ``effects()`` returns a number that grows with the handlers' effect (or a
    dict of such numbers, one per outside effect, each judged on its own). For
    the order case, ``state(body)`` reads the state the event about ``body``
    sets, and ``older_body(newer)`` returns an older event about the same
    object (by default ``newer`` itself) of type ``older_event_type``.
    ``sign(body, *, event_type, delivery_id, occurred_at)`` signs for a
    verifier of one's own.
    """

    source: str
    event_type: str
    body: Callable[[], Any]
    effects: Callable[[], Any]
    url: str | None = None
    older_event_type: str | None = None
    older_body: Callable[[Any], Any] | None = None
    state: Callable[[Any], Any] | None = None
    sign: Callable[..., SignedDelivery] | None = None
    # The steps whose effect stays on purpose when the unit gives up (a mail
    # sent); every other step moving effects() needs an undo.
    kept_steps: Collection[str] = ()

    def signed(
        self,
        body,
        *,
        event_type: str | None = None,
        delivery_id: str | None = None,
        occurred_at: datetime | None = None,
    ) -> SignedDelivery:
        signer = self.sign or _sign_for(self.source)
        return signer(
            body,
            event_type=event_type or self.event_type,
            delivery_id=delivery_id,
            occurred_at=occurred_at,
        )


def _sign_for(source):
    def signer(body, **kwargs):
        try:
            return sign(source, body, **kwargs)
        except CannotSign as exc:
            _cannot_sign(source, exc)

    return signer


def _cannot_sign(source, exc: CannotSign) -> NoReturn:
    """Skip a case whose source's verifier cannot sign (the suite's own
    ``sign()`` is missing); a source that is not configured is a mistake,
    never a skip: every case would be skipped, green, proving nothing."""
    if sources.get(source) is None:
        raise g.CannotCheck(
            "webhook",
            f"{exc}; set the suite's source to a key of WEBHOOKS['SOURCES'] "
            f"({', '.join(map(repr, webhooks_settings.SOURCES)) or 'none'}).",
        ) from None
    pytest.skip(str(exc))


class Intake:
    """POST signed deliveries to the intake, and process what they enqueued,
    in this thread, as a worker would. Use it inside ``intake()``."""

    def __init__(self, url: str | None = None):
        self.url = url
        self.client = Client()

    def url_for(self, source: str) -> str:
        return self.url or reverse("webhooks:intake", args=[source])

    def post(self, delivery: SignedDelivery):
        """Send ``delivery``; return the answer and the receipts it enqueued."""
        _enqueued.clear()
        # Inside a test transaction the enqueue waits for a commit that never
        # comes: run it at the end of the request instead.
        with TestCase.captureOnCommitCallbacks(
            using=router.db_for_write(WebhookReceipt), execute=True
        ):
            response = self.client.post(
                self.url_for(delivery.source),
                data=delivery.body,
                content_type=delivery.content_type,
                headers=delivery.headers,
            )
        return response, list(_enqueued)

    def accept(self, delivery: SignedDelivery):
        """POST a new ``delivery``, which must be accepted; return the answer
        and the receipts it enqueued."""
        response, queued = self.post(delivery)
        if response.status_code >= 300:
            raise g.CannotCheck(
                "webhook",
                f"the intake at {self.url_for(delivery.source)} refused a "
                f"{delivery.source} delivery the kit signed: {g.answer(response)}",
            )
        return response, queued

    def process(self, receipt_id: int) -> str:
        """Run the receipt's handlers as a worker would."""
        try:
            return process(receipt_id)
        except HandlerFailed:
            receipt = WebhookReceipt.objects.get(pk=receipt_id)
            raise g.CannotCheck(
                "webhook",
                f"a handler of {receipt.source} {receipt.event_type} raised:\n"
                f"{receipt.last_error[-1500:]}",
            ) from None

    def process_all(self, queued: list[int]) -> None:
        """Run the handlers of every receipt in ``queued``, in turn."""
        for receipt_id in queued:
            self.process(receipt_id)

    def deliver(self, delivery: SignedDelivery):
        """POST a new ``delivery`` and process it; return the intake's answer."""
        response, queued = self.accept(delivery)
        self.process_all(queued)
        return response

    def send(self, source: str, body, *, event_type: str, **signing):
        """Sign ``body`` for ``source`` (see ``signing.sign``), deliver it and
        process it; return the intake's answer."""
        return self.deliver(sign(source, body, event_type=event_type, **signing))


@contextmanager
def intake(url: str | None = None) -> Iterator[Intake]:
    """Route the intake's enqueue to the test's worker for the block."""
    configured = getattr(settings, "WEBHOOKS", {})
    with override_settings(WEBHOOKS={**configured, "ENQUEUE": f"{__name__}.collect"}):
        yield Intake(url)


def check_webhook_redelivery(webhook: Webhook) -> None:
    """The provider delivers the same event again, with the same delivery id,
    and a worker gets the receipt twice: the handlers' effect happens once
    (failure case 5)."""
    __tracebackhide__ = True
    with intake(webhook.url) as desk:
        delivery = webhook.signed(webhook.body())

        def again():
            # Re-signed as providers do on a retry: same id, same body.
            answer, queued = desk.post(
                webhook.signed(delivery.body, delivery_id=delivery.delivery_id)
            )
            desk.process_all(queued)
            # A worker that picks the receipt up once more (a redelivered task).
            desk.process(_receipt(delivery).pk)
            return answer

        first, second, readings = _processed_then(webhook, desk, delivery, again)
    _require_no_second_effect(
        REDELIVERED_WEBHOOK,
        webhook,
        f"{delivery.delivery_id}, delivered twice and processed again",
        readings,
        f"first answer: {g.answer(first)}",
        f"redelivery:   {g.answer(second)}",
    )


def _processed_then(webhook, desk, delivery, then):
    """Deliver and process ``delivery``, then call ``then()``; return the
    intake's first answer, what ``then()`` returned, and the effects read
    before, at the end and after the first run."""
    before = g.measure(webhook.effects)
    first = desk.deliver(delivery)
    applied = g.measure(webhook.effects)
    _require_an_effect(webhook, before, applied)
    second = then()
    return first, second, (before, g.measure(webhook.effects), applied)


def _require_no_second_effect(guarantee, webhook, what, readings, *evidence):
    """Raise ``GuaranteeBroken`` unless the effects read ``(before, after,
    applied)`` stayed where the first run put them."""
    __tracebackhide__ = True
    before, after, applied = readings
    if after != applied:
        raise g.broken(
            guarantee,
            f"{webhook.source} {webhook.event_type} delivery {what}",
            g.change(before, after, applied),
            *evidence,
        )


def check_webhook_crash(webhook: Webhook) -> None:
    """The worker dies just before and just after each durable point of
    processing; the task is redelivered; the effect must be there once."""
    __tracebackhide__ = True
    require_committed_transactions("webhook crash")
    with intake(webhook.url) as desk:
        delivery = webhook.signed(webhook.body())
        before = g.measure(webhook.effects)
        _, queued = desk.accept(delivery)
        with tasks_sent() as sent, commit_points() as points:
            desk.process_all(queued)
        after = g.measure(webhook.effects)
        if sent:
            # Outside the database, which no count of rows shows: a send
            # cannot commit with the handler's change, so a worker dying
            # before that commit has the redelivered receipt send it again.
            raise sent_straight(
                CRASHED_WEBHOOK,
                f"{webhook.source} {webhook.event_type} delivery "
                f"{delivery.delivery_id}",
                sent,
                "the handler's change",
            )
        _require_an_effect(webhook, before, after)
        delta = growth(before, after)
        problems = g.Problems(
            CRASHED_WEBHOOK, f"processing's durable points: {points.describe()}"
        )
        for number in range(1, len(points.points) + 1):
            for when in (BEFORE, AFTER):
                problems.extend(_crash_and_retry(webhook, desk, number, when, delta))
    problems.raise_if_any()


def check_webhook_failure(webhook: Webhook) -> None:
    """The handlers' work fails after their first write (inside the ORM, then
    as their first model save completes, where a handler's own ``except``
    gets it). A handler must let it raise, so the receipt fails and its task
    is retried, and the retry must apply the event once. A handler that
    returns instead has its receipt marked processed: whatever the failure
    undid is lost, and no retry comes."""
    __tracebackhide__ = True
    require_committed_transactions("webhook failure")
    with intake(webhook.url) as desk:
        before = g.measure(webhook.effects)
        desk.deliver(webhook.signed(webhook.body()))
        after = g.measure(webhook.effects)
        _require_an_effect(webhook, before, after)

        def start():
            delivery = webhook.signed(webhook.body())
            _, queued = desk.accept(delivery)

            def run():
                try:
                    for receipt_id in queued:
                        process(receipt_id)
                except HandlerFailed as exc:
                    # Named in the report: the handler's own exception.
                    return exc.__cause__ or exc
                return None

            def retry():
                with controlled_clock() as clock:
                    clock.advance(_past_a_lease())  # the task's retry, later
                    for receipt_id in queued:
                        process(receipt_id, failures=1)

            return f"delivery {delivery.delivery_id}", run, retry

        problems = fail_then_retry(
            start,
            _FAILURES,
            effects=webhook.effects,
            delta=growth(before, after),
            returned="the handler returned instead of raising, so the receipt "
            "is marked processed and never retried",
            retried="then the task was retried",
        )
    if problems is None:
        # Its outside calls are steps, or its effect is not in the database.
        pytest.skip("the handlers wrote nothing of their own for the kit to fail after")
    if problems:
        raise g.broken(
            FAILED_WEBHOOK, f"{webhook.source} {webhook.event_type}", *problems
        )


# Past the library's own rows: the kit fails the work, not them.
_FAILURES = failures_past((WebhookReceipt, UnitRecord, StepRecord))


def check_webhook_forced_reprocess(webhook: Webhook) -> None:
    """An operator force-reprocesses a processed receipt (the console's
    action, to run a handler added since): every handler of its event runs
    again, and must tolerate it, as the confirmation page says. Skipped for
    steps handlers, whose finished unit the console leaves alone."""
    __tracebackhide__ = True
    require_committed_transactions("webhook forced reprocess")
    if runs_steps_handlers(webhook):
        pytest.skip(
            "steps handlers: the console does not force a finished unit, whose "
            "steps would return their recovery points"
        )
    with intake(webhook.url) as desk:
        delivery = webhook.signed(webhook.body())

        def force_reprocess():
            # Reopened as the console's force reprocess does (webhooks.admin).
            receipts = WebhookReceipt.objects.filter(pk=_receipt(delivery).pk)
            receipts.update(
                state=WebhookReceipt.State.RECEIVED, processed_at=None, worker_deaths=0
            )
            desk.process_all([receipts.get().pk])

        *_, readings = _processed_then(webhook, desk, delivery, force_reprocess)
    _require_no_second_effect(
        FORCED_WEBHOOK,
        webhook,
        f"{delivery.delivery_id}, processed, then force-reprocessed",
        readings,
        "a handler runs again on a forced reprocess: apply the event only "
        "where the state it sets is not there yet (an order already paid "
        "stays paid), or call out with event.derive(step) as the key",
    )


def check_webhook_crash_after_each_step(webhook: Webhook) -> None:
    """A steps handler dies right after each of its steps' recovery points in
    turn; once its lease lapses the task is redelivered: each effect must
    have happened once. An outside call made outside ``event.step()`` is
    made again by the redelivery that resumes past the steps."""
    __tracebackhide__ = True
    case = "webhook crash after each step"
    _require_steps_handlers(webhook, case)
    with intake(webhook.url) as desk:
        before = g.measure(webhook.effects)
        with step_kills() as probe:
            desk.deliver(webhook.signed(webhook.body()))
        after = g.measure(webhook.effects)
        _require_an_effect(webhook, before, after)
        if not probe.steps:
            raise g.CannotCheck(case, _NO_STEP_RUN)

        def start():
            _, queued = desk.accept(webhook.signed(webhook.body()))
            return lambda: desk.process_all(queued)

        problems = kill_after_each_step(
            probe.steps, start, webhook.effects, growth(before, after), _past_a_lease()
        )
    if problems:
        raise g.broken(
            CRASHED_STEPS_WEBHOOK,
            f"{webhook.source} {webhook.event_type}; its steps: {probe.describe()}",
            *problems,
        )


def check_webhook_abandon_undoes_each_step(webhook: Webhook) -> None:
    """The compensation case on the event's steps handlers, a new delivery
    for each unit (``idempotency.shared.testing.compensations``): killed after
    their last step, abandoned, each undo run once, last first."""
    __tracebackhide__ = True
    case = "webhook abandon after the steps"
    _require_steps_handlers(webhook, case)
    with intake(webhook.url) as desk:

        def start():
            _, queued = desk.accept(webhook.signed(webhook.body()))
            return lambda: desk.process_all(queued)

        subject = f"{webhook.source} {webhook.event_type}; its steps: {{steps}}"
        ran = abandon_after_steps(case, start, webhook, COMPENSATED_WEBHOOK, subject)
    if not ran:
        raise g.CannotCheck(case, _NO_STEP_RUN)


def _require_steps_handlers(webhook: Webhook, case: str) -> None:
    require_committed_transactions(case)
    if not runs_steps_handlers(webhook):
        raise g.CannotCheck(
            case,
            f"the handlers of {webhook.source} {webhook.event_type} are not "
            f"steps handlers: register them with @on({webhook.source!r}, "
            f"{webhook.event_type!r}, steps=True).",
        )


def runs_steps_handlers(webhook: Webhook) -> bool:
    """Whether the handlers of ``webhook``'s event are steps handlers."""
    return runs_steps(handlers_for(webhook.source, webhook.event_type))


def _past_a_lease() -> timedelta:
    """Longer than the lease a first run takes before its handlers start:
    STEPS_LEASE (at least a second) for steps handlers, a second for others."""
    return webhooks_settings.STEPS_LEASE + timedelta(seconds=1)


def check_webhook_order(webhook: Webhook) -> None:
    """A newer event arrives first, an older one about the same object after
    it: the older one must not overwrite the newer state."""
    __tracebackhide__ = True
    now = clock.now()
    _check_in_turn(webhook, newer_first=True, older_at=now - LATE_BY, newer_at=now)


def check_webhook_newer_after_older(webhook: Webhook) -> None:
    """An older event arrives first, a newer one about the same object after
    it, both late (a provider's backlog): the newer one must be applied. A
    handler that stamps its state with the arrival time ignores it."""
    __tracebackhide__ = True
    # Both happened a while ago and arrive now, the older one first.
    earlier = clock.now() - STALE_BY
    later = earlier + STALE_BY / 2
    _check_in_turn(webhook, newer_first=False, older_at=earlier, newer_at=later)


def _check_in_turn(
    webhook: Webhook, *, newer_first: bool, older_at: datetime, newer_at: datetime
) -> None:
    """The order cases, one for each direction: an older and a newer event
    about one object arrive in turn, and the newer one's state must be left.

    The event that comes second is first delivered alone, about an object of
    its own, to learn the state it sets by itself."""
    __tracebackhide__ = True
    with intake(webhook.url) as desk:
        order = _Ordering.of(webhook, desk)
        older = _Event(order.older_type, older_at, order.older)
        newer = _Event(webhook.event_type, newer_at, order.newer)
        first, second = (newer, older) if newer_first else (older, newer)
        alone = second.deliver(webhook.body())
        subject = webhook.body()
        first_state = first.deliver(subject)
        if newer_first:
            older_state, newer_state = alone, first_state
        else:
            older_state, newer_state = first_state, alone
        order.require_distinct(older_state, newer_state)
        final = second.deliver(subject)
    if final == newer_state:
        return
    if newer_first:
        guarantee, left = STALE_WEBHOOK, f"set {g.shown(final)}"
        advice = (
            "order by event.is_stale(<the stamp of the state>), never by "
            "arrival, and stamp the state with event.occurred_at as each event "
            "applies (a stamp never saved makes every event look new)"
        )
    else:
        guarantee = NEWER_WEBHOOK
        left = f"left {g.shown(final)}; on its own it sets {g.shown(newer_state)}"
        advice = (
            "stamp the state with event.occurred_at, never the arrival time, and "
            "apply every event that is not event.is_stale(<that stamp>)"
        )
    raise g.broken(
        guarantee,
        f"{webhook.source}: {first.describe()} arrived first and set "
        f"{g.shown(first_state)}",
        f"then {second.describe()} arrived and {left}",
        advice,
    )


@dataclass
class _Event:
    """One of the order cases' two events: its type, its time, and how it is
    delivered about an object (returning the state it leaves)."""

    type: str
    occurred_at: datetime
    delivery: Callable[[Any, datetime], Any]

    def deliver(self, body) -> Any:
        return self.delivery(body, self.occurred_at)

    def describe(self) -> str:
        return f"{self.type} of {self.occurred_at:%H:%M:%S}"


@dataclass
class _Ordering:
    """Deliver the order cases' older and newer events about an object, and
    read the state each leaves."""

    webhook: Webhook
    desk: Intake
    state: Callable[[Any], Any]
    older_type: str
    older_body: Callable[[Any], Any]

    @classmethod
    def of(cls, webhook: Webhook, desk: Intake) -> "_Ordering":
        """Skip the order cases where events cannot be ordered."""
        if webhook.sign is None and not _carries_event_time(webhook.source):
            pytest.skip(
                f"{verifier_kind(webhook.source)} deliveries carry no event time, "
                "so handlers cannot order them by event.occurred_at; order by a "
                "time in the payload and prove it in a test of your own"
            )
        if webhook.state is None:
            pytest.skip("define state(body) to prove that events apply in order")
        return cls(
            webhook,
            desk,
            webhook.state,
            webhook.older_event_type or webhook.event_type,
            webhook.older_body or (lambda newer: newer),
        )

    def older(self, body, occurred_at: datetime):
        """Deliver the older event about ``body``'s object; return its state."""
        older = self.older_body(body)
        self.desk.deliver(
            self.webhook.signed(
                older, event_type=self.older_type, occurred_at=occurred_at
            )
        )
        return self.state(body)

    def newer(self, body, occurred_at: datetime):
        """Deliver the event about ``body``; return the state it leaves."""
        self.desk.deliver(self.webhook.signed(body, occurred_at=occurred_at))
        return self.state(body)

    def require_distinct(self, older_state, newer_state) -> None:
        if older_state == newer_state:
            raise g.CannotCheck(
                "webhook order",
                f"the older {self.older_type} event sets the same state as the "
                f"newer {self.webhook.event_type} ({g.shown(newer_state)}), so "
                "their order cannot show; give an older event that sets another "
                "(older_event_type, older_body)",
            )


# Every case of a webhook, for ``pytest.mark.parametrize("check", ...)``.
WEBHOOK_CHECKS = (
    check_webhook_redelivery,
    check_webhook_crash,
    check_webhook_failure,
    check_webhook_forced_reprocess,
    check_webhook_order,
    check_webhook_newer_after_older,
)


def _carries_event_time(source) -> bool:
    try:
        return signer(source).carries_event_time
    except CannotSign as exc:
        _cannot_sign(source, exc)


def _crash_and_retry(webhook, desk, number, when, delta) -> list[str]:
    delivery = webhook.signed(webhook.body())
    before = g.measure(webhook.effects)
    _, queued = desk.accept(delivery)
    # The worker dies, then its unacked task is redelivered once the lease its
    # run took has lapsed.
    return die_then_judge(
        lambda: desk.process_all(queued),
        number,
        when,
        _past_a_lease(),
        effects=webhook.effects,
        before=before,
        delta=delta,
        told="the worker died {crashed}, then the task was redelivered",
    )


def _require_an_effect(webhook, before, after):
    source, event_type = webhook.source, webhook.event_type
    advice = (
        f"is a handler registered with @on({source!r}, {event_type!r}), "
        "and does effects() count what it does?"
    )
    if not handlers_for(source, event_type):
        # A type misspelt in @on() is never sent by the provider: the
        # handler waits for nothing. Show what is registered instead.
        handled = event_types_handled(source)
        advice = (
            f"is a handler registered with @on({source!r}, {event_type!r})? "
            f"None is; {source}'s handlers are registered for "
            f"{', '.join(map(repr, handled)) or 'no event type'}: is one of "
            "them misspelt, or not the type the provider sends?"
        )
    g.require_an_effect(
        "webhook",
        before,
        after,
        when=f"after a {source} {event_type} delivery was processed",
        advice=advice,
    )


def _receipt(delivery: SignedDelivery):
    return WebhookReceipt.objects.get(
        source=delivery.source, delivery_id=delivery.delivery_id
    )


__all__ = [
    "COMPENSATED_WEBHOOK",
    "CRASHED_STEPS_WEBHOOK",
    "CRASHED_WEBHOOK",
    "FAILED_WEBHOOK",
    "FORCED_WEBHOOK",
    "LATE_BY",
    "NEWER_WEBHOOK",
    "REDELIVERED_WEBHOOK",
    "STALE_BY",
    "STALE_WEBHOOK",
    "WEBHOOK_CHECKS",
    "Intake",
    "Webhook",
    "check_webhook_abandon_undoes_each_step",
    "check_webhook_crash",
    "check_webhook_crash_after_each_step",
    "check_webhook_failure",
    "check_webhook_forced_reprocess",
    "check_webhook_newer_after_older",
    "check_webhook_order",
    "check_webhook_redelivery",
    "collect",
    "intake",
    "runs_steps_handlers",
]
