"""The test class that runs every failure case against one source's event and
its handlers: subclass it, say what to send and what to count, and pytest
collects a test per case (see ``idempotency.testing.suites`` for how the
suites run)."""

from typing import Any

import pytest

from idempotency.shared.testing.suites import Suite

from . import deliveries
from .signing import SignedDelivery


class WebhookSuite(Suite):
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
    # enables the order cases.
    state = None
    # A method sign(body, *, event_type, delivery_id, occurred_at) returning a
    # SignedDelivery, for a verifier of one's own.
    sign = None
    # Steps handlers: the steps whose effect stays on purpose when the unit
    # gives up (a mail sent); every other step moving effects() needs an undo.
    kept_steps: tuple[str, ...] = ()

    def webhook(self) -> deliveries.Webhook:
        return self._subject(deliveries.Webhook)

    def test_a_redelivered_webhook_runs_its_handlers_once(self):
        deliveries.check_webhook_redelivery(self.webhook())

    def test_a_worker_dying_while_processing_applies_it_once(self):
        deliveries.check_webhook_crash(self.webhook())

    def test_a_failed_handler_is_retried_and_applied_once(self):
        deliveries.check_webhook_failure(self.webhook())

    def test_a_forced_reprocess_makes_no_effect_twice(self):
        deliveries.check_webhook_forced_reprocess(self.webhook())

    def test_a_crash_after_each_step_runs_each_step_once(self):
        webhook = self.webhook()
        if not deliveries.runs_steps_handlers(webhook):
            pytest.skip("not a steps handler (@on(..., steps=True))")
        deliveries.check_webhook_crash_after_each_step(webhook)

    def test_a_unit_given_up_undoes_each_step_once_last_first(self):
        """Steps handlers only: the unit is abandoned after its steps ran,
        and again after its compensation died midway; ``effects()`` counts
        what stands (``charges - refunds``)."""
        webhook = self.webhook()
        if not deliveries.runs_steps_handlers(webhook):
            pytest.skip("not a steps handler (@on(..., steps=True))")
        deliveries.check_webhook_abandon_undoes_each_step(webhook)

    def test_an_older_event_arriving_late_is_ignored(self):
        deliveries.check_webhook_order(self.webhook())

    def test_a_newer_event_arriving_after_an_older_one_is_applied(self):
        deliveries.check_webhook_newer_after_older(self.webhook())


__all__ = ["SignedDelivery", "WebhookSuite"]
