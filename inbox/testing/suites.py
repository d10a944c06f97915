"""The test class that runs every failure case against one message consumer:
subclass it, say what to call and what to count, and pytest collects a test
per case (see ``idempotency.testing.suites`` for how the suites run)."""

from typing import Any

import pytest

from idempotency.shared.testing.suites import Suite

from . import consumers


class ConsumerSuite(Suite):
    """Every failure case of one message consumer (see ``consumers``)."""

    # The Celery task or function, called with the relay's keyword arguments.
    consumer: Any
    event_type: str
    aggregate_type = ""
    # The event's payload, or a method returning one per message.
    payload: Any
    # Steps consumers: the steps whose effect stays on purpose when the unit
    # gives up (a mail sent); every other step moving effects() needs an undo.
    kept_steps: tuple[str, ...] = ()

    def deliver(self, consume, message: consumers.Message):
        """Hand ``message`` to ``consume``; override for another signature."""
        return consumers.call_with_task_kwargs(consume, message)

    def consumer_under_test(self) -> consumers.Consumer:
        consume = self._required("consumer")
        # A function set as a class attribute would bind as a method.
        if isinstance(consume, staticmethod):
            consume = consume.__func__
        return self._subject(consumers.Consumer, consume=consume)

    def test_a_redelivered_message_is_applied_once(self):
        consumers.check_redelivery(self.consumer_under_test())

    def test_a_crash_after_the_commit_before_the_ack_applies_once(self):
        consumers.check_crash_before_ack(self.consumer_under_test())

    def test_a_crash_at_any_point_applies_exactly_once(self):
        consumers.check_crash_anywhere(self.consumer_under_test())

    def test_a_failed_delivery_is_redelivered_and_applied_once(self):
        consumers.check_failed_delivery(self.consumer_under_test())

    def test_a_crash_after_each_step_runs_each_step_once(self):
        consumer = self.consumer_under_test()
        if not consumers.runs_steps(consumer.consume):
            pytest.skip("not a steps consumer (@consumer(..., steps=True))")
        consumers.check_crash_after_each_step(consumer)

    def test_a_unit_given_up_undoes_each_step_once_last_first(self):
        """Steps consumers only: the unit is abandoned after its steps ran,
        and again after its compensation died midway; ``effects()`` counts
        what stands (``bookings - cancellations``)."""
        consumer = self.consumer_under_test()
        if not consumers.runs_steps(consumer.consume):
            pytest.skip("not a steps consumer (@consumer(..., steps=True))")
        consumers.check_abandon_undoes_each_step(consumer)


__all__ = ["ConsumerSuite"]
