"""The test class that runs every failure case against one keyed endpoint:
subclass it, say what to call and what to count, and pytest collects a test
per case.

    class TestPlaceOrder(EndpointSuite):
        url = "/api/orders/"
        payload = {"sku": "BOOK-1", "quantity": 1}

        def effects(self):
            return Order.objects.count()

Every test runs on committed transactions (pytest-django's
``transactional_db``) and carries the ``once`` marker (``pytest -m once``).
A case the class cannot wire is skipped with the reason; to leave a case
out, set its test to ``None`` in the subclass. ``ConsumerSuite`` lives in
``inbox.testing.suites``, ``WebhookSuite`` in ``webhooks.testing.suites``.
"""

import warnings
from datetime import timedelta
from typing import Any

from idempotency.shared.testing.suites import Suite

from . import endpoints


class EndpointSuite(Suite):
    """Every failure case of one keyed HTTP endpoint (see ``endpoints``)."""

    # The path, the method and the body of a request the view accepts; the
    # payload may be a method returning a fresh body per case.
    url: str
    method = "post"
    payload: Any
    # A body the view refuses before changing anything (400): enables the
    # validation case. It may be a method, as the payload may.
    invalid_payload: Any = None
    # The body sent with a used key; by default the payload plus a field. It
    # may be a method too.
    changed_payload: Any = None
    # The payload fields the view leaves out of its fingerprint on purpose
    # (dotted for nested ones): every other field is changed in turn.
    exclude_fields: tuple[str, ...] = ()
    # How long the client retries (an offline queue): the key must outlive it.
    retry_horizon: timedelta | float | None = None
    # What the view calls for the outside world, as mock.patch names it:
    # enables the derived-key case.
    downstream: str | None = None
    # How many identical requests race on one key.
    concurrency = 8
    # How a payload is sent: JSON, or a form ("multipart/form-data",
    # "application/x-www-form-urlencoded") for a view reading request.POST.
    content_type = endpoints.JSON
    # A method returning a context manager under which the view fails; by
    # default the kit fails the view right after its first write.
    fail = None
    # Steps mode: the steps whose effect stays on purpose when the unit gives
    # up (a mail sent); every other step moving effects() needs an undo.
    kept_steps: tuple[str, ...] = ()

    def client(self, name: str):
        """A test client acting as the principal ``name`` (two names, two
        scopes); by default an ``APIClient`` forced to the user ``once-<name>``."""
        return endpoints.default_client(name)

    def downstream_key(self, *args, **kwargs):
        """The idempotency key in a call to ``downstream``."""
        return kwargs.get("idempotency_key")

    def endpoint(self) -> endpoints.Endpoint:
        return self._subject(endpoints.Endpoint)

    def test_lost_response_replays_the_stored_answer(self):
        endpoints.check_lost_response(self.endpoint())

    def test_racing_duplicates_make_one_effect(self):
        endpoints.check_race(self.endpoint())

    def test_same_key_with_another_payload_is_refused(self):
        endpoints.check_payload_mismatch(self.endpoint())

    def test_each_field_changed_under_a_used_key_is_refused(self):
        endpoints.check_each_field_fingerprinted(self.endpoint())

    def test_failed_attempt_rolls_back_and_its_retry_runs(self):
        endpoints.check_failed_attempt(self.endpoint())

    def test_a_failure_at_the_completion_is_never_stored_as_a_success(self):
        endpoints.check_failure_at_completion(self.endpoint())

    def test_a_crash_right_after_the_commit_loses_no_effect(self):
        endpoints.check_crash_after_commit(self.endpoint())

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

    def test_two_scopes_sending_one_key_call_downstream_with_different_keys(self):
        endpoints.check_downstream_key_scoped(self.endpoint())

    def test_a_crash_after_each_step_runs_each_step_once(self):
        """Steps-mode views only (``idempotency_mode = "steps"``); skipped
        for a view that runs no step."""
        endpoints.check_crash_after_each_step(self.endpoint())

    def test_a_unit_given_up_undoes_each_step_once_last_first(self):
        """Steps-mode views only: the unit is abandoned after its steps ran,
        and again after its compensation died midway; ``effects()`` counts
        what stands (``charges - refunds``). Skipped for a view that runs no
        step."""
        endpoints.check_abandon_undoes_each_step(self.endpoint())


# Deprecated for one release: the suites of the other apps' kits. The one
# arrow from this module up to them, imported only when the old name is used.
_MOVED = {
    "ConsumerSuite": "inbox.testing.suites",
    "WebhookSuite": "webhooks.testing.suites",
    "SignedDelivery": "webhooks.testing.signing",
}


def __getattr__(name):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} moved to {_MOVED[name]}.{name}; the old path goes in 0.3.",
        DeprecationWarning,
        stacklevel=2,
    )
    from inbox.testing.suites import ConsumerSuite
    from webhooks.testing.suites import SignedDelivery, WebhookSuite

    moved = {
        "ConsumerSuite": ConsumerSuite,
        "WebhookSuite": WebhookSuite,
        "SignedDelivery": SignedDelivery,
    }
    return moved[name]


__all__ = ["EndpointSuite"]
