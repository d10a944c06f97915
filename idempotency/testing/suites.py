"""Test classes that run every failure case against one endpoint, consumer or
webhook: subclass one, say what to call and what to count, and pytest
collects a test per case.

    class TestPlaceOrder(EndpointSuite):
        url = "/api/orders/"
        payload = {"sku": "BOOK-1", "quantity": 1}

        def effects(self):
            return Order.objects.count()

Every test runs on committed transactions (pytest-django's
``transactional_db``) and carries the ``once`` marker (``pytest -m once``).
A case the class cannot wire is skipped with the reason; to leave a case
out, set its test to ``None`` in the subclass.
"""

import inspect
from datetime import timedelta
from typing import Any

import pytest

from . import consumers, deliveries, endpoints
from .signing import SignedDelivery


class _Suite:
    pytestmark = [pytest.mark.once]

    @pytest.fixture(autouse=True)
    def _once_committed_transactions(self, transactional_db):
        """Every case commits for real: races, crashes and replays need it."""

    def effects(self) -> Any:
        """A number that grows with the business effect under test."""
        raise NotImplementedError(
            f"{type(self).__name__} must define effects(), returning a number "
            "that grows with the business effect (e.g. Order.objects.count())."
        )

    def _required(self, name: str):
        try:
            return inspect.getattr_static(type(self), name)
        except AttributeError:
            raise NotImplementedError(
                f"{type(self).__name__} must set {name}."
            ) from None


class EndpointSuite(_Suite):
    """Every failure case of one keyed HTTP endpoint (see ``endpoints``)."""

    # The path, the method and the body of a request the view accepts; the
    # payload may be a method returning a fresh body per case.
    url: str
    method = "post"
    payload: Any = None
    # A body the view refuses before changing anything (400): enables the
    # validation case.
    invalid_payload: Any = None
    # The body sent with a used key; by default the payload plus a field.
    changed_payload: Any = None
    # How long the client retries (an offline queue): the key must outlive it.
    retry_horizon: timedelta | None = None
    # What the view calls for the outside world, as mock.patch names it:
    # enables the derived-key case.
    downstream: str | None = None
    # How many identical requests race on one key.
    concurrency = 8
    # A method returning a context manager under which the view fails; by
    # default the kit fails the view right after its first write.
    fail = None

    def client(self, name: str):
        """A test client acting as the principal ``name`` (two names, two
        scopes); by default an ``APIClient`` forced to the user ``once-<name>``."""
        return endpoints.default_client(name)

    def downstream_key(self, *args, **kwargs):
        """The idempotency key in a call to ``downstream``."""
        return kwargs.get("idempotency_key")

    def endpoint(self) -> endpoints.Endpoint:
        self._required("url")
        return endpoints.Endpoint(
            url=self.url,
            payload=self.payload,
            effects=self.effects,
            client=self.client,
            method=self.method,
            invalid_payload=self.invalid_payload,
            changed_payload=self.changed_payload,
            fail=self.fail,
            retry_horizon=self.retry_horizon,
            downstream=self.downstream,
            downstream_key=self.downstream_key,
            concurrency=self.concurrency,
        )

    def test_lost_response_replays_the_stored_answer(self):
        endpoints.check_lost_response(self.endpoint())

    def test_racing_duplicates_make_one_effect(self):
        endpoints.check_race(self.endpoint())

    def test_same_key_with_another_payload_is_refused(self):
        endpoints.check_payload_mismatch(self.endpoint())

    def test_failed_attempt_rolls_back_and_its_retry_runs(self):
        endpoints.check_failed_attempt(self.endpoint())

    def test_corrected_retry_after_a_validation_failure_runs(self):
        endpoints.check_validation_failure(self.endpoint())

    def test_within_the_ttl_a_retry_replays_after_it_runs_as_new(self):
        """Documented: past its TTL a key is forgotten, so a late retry runs
        as new. Set ``retry_horizon`` to prove the TTL outlasts your client's
        retries."""
        endpoints.check_expiry(self.endpoint())

    def test_another_scope_never_gets_the_stored_answer(self):
        endpoints.check_other_scope(self.endpoint())

    def test_crash_after_the_downstream_call_retries_with_the_same_key(self):
        endpoints.check_derived_key(self.endpoint())


class ConsumerSuite(_Suite):
    """Every failure case of one message consumer (see ``consumers``)."""

    # The Celery task or function, called with the relay's keyword arguments.
    consumer: Any
    event_type: str
    aggregate_type = ""
    # The event's payload, or a method returning one per message.
    payload: Any = None

    def deliver(self, consume, message: consumers.Message):
        """Hand ``message`` to ``consume``; override for another signature."""
        return consumers.call_with_task_kwargs(consume, message)

    def consumer_under_test(self) -> consumers.Consumer:
        consume = self._required("consumer")
        # A function set as a class attribute would bind as a method.
        if isinstance(consume, staticmethod):
            consume = consume.__func__
        return consumers.Consumer(
            consume=consume,
            event_type=self._required("event_type"),
            payload=self.payload,
            effects=self.effects,
            aggregate_type=self.aggregate_type,
            deliver=self.deliver,
        )

    def test_a_redelivered_message_is_applied_once(self):
        consumers.check_redelivery(self.consumer_under_test())

    def test_a_crash_after_the_commit_before_the_ack_applies_once(self):
        consumers.check_crash_before_ack(self.consumer_under_test())

    def test_a_crash_at_any_point_applies_exactly_once(self):
        consumers.check_crash_anywhere(self.consumer_under_test())


class WebhookSuite(_Suite):
    """Every failure case of one source's event and its handlers (see
    ``deliveries``)."""

    source: str
    event_type: str
    # The intake URL; by default reverse("webhooks:intake", args=[source]).
    url: str | None = None
    # The older event of the order case; by default the same type.
    older_event_type: str | None = None

    def body(self) -> Any:
        """A new event, as the provider sends it, for each delivery."""
        raise NotImplementedError(
            f"{type(self).__name__} must define body(), returning a new event "
            "(a JSON object) per delivery."
        )

    def older_body(self, newer: Any) -> Any:
        """An older event about the same object as ``newer``."""
        return newer

    # A method state(body) reading the state the event about body sets:
    # enables the order case.
    state = None
    # A method sign(body, *, event_type, delivery_id, occurred_at) returning a
    # SignedDelivery, for a verifier of one's own.
    sign = None

    def webhook(self) -> deliveries.Webhook:
        return deliveries.Webhook(
            source=self._required("source"),
            event_type=self._required("event_type"),
            body=self.body,
            effects=self.effects,
            url=self.url,
            older_event_type=self.older_event_type,
            older_body=self.older_body,
            state=self.state,
            sign=self.sign,
        )

    def test_a_redelivered_webhook_runs_its_handlers_once(self):
        deliveries.check_webhook_redelivery(self.webhook())

    def test_a_worker_dying_while_processing_applies_it_once(self):
        deliveries.check_webhook_crash(self.webhook())

    def test_an_older_event_arriving_late_is_ignored(self):
        deliveries.check_webhook_order(self.webhook())


__all__ = ["ConsumerSuite", "EndpointSuite", "SignedDelivery", "WebhookSuite"]
