"""The endpoint checks pass on guarded views and name what broken views break."""

import re
import uuid
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db.models import Sum
from django.test import Client

from idempotency.shared.testing.guarantees import CannotCheck
from idempotency.testing import endpoints
from idempotency.testing.endpoints import Endpoint
from tests.testapp.downstream import provider
from tests.testapp.models import Stock, Widget
from tests.testing import sound
from tests.testing.helpers import broken_message, new_widget, widget_count

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.testing.urls"),
]

CHARGE = "tests.testapp.downstream.provider.charge"
BY_NAME = {"ids": lambda check: check.__name__}


def widgets(url="/t/widgets/", **options) -> Endpoint:
    return Endpoint(url=url, payload=new_widget, effects=widget_count, **options)


def charges(url="/t/charge/", **options) -> Endpoint:
    """The lease-mode views: a downstream charge, then a local widget."""
    options = {"payload": {"amount": 500}, **options}
    return Endpoint(
        url=url,
        effects=widget_count,
        downstream=CHARGE,
        downstream_key=lambda key, amount: key,
        **options,
    )


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_guarded_viewset(check):
    check(widgets(invalid_payload={"name": ""}, retry_horizon=timedelta(hours=1)))


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_lease_mode_view_calling_downstream(check):
    check(charges(invalid_payload={"amount": 0}))


def widgets_and_mails():
    """One count per effect, as the steps case documents (these views mail
    nothing: a count that must not move)."""
    return {"widgets": widget_count(), "mails": len(mail.outbox)}


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_with_one_count_per_effect(check):
    endpoint = charges(invalid_payload={"amount": 0})
    check(replace(endpoint, effects=widgets_and_mails))


@pytest.mark.postgresql
def test_a_race_counted_per_effect_names_the_effect_it_doubled():
    endpoint = replace(widgets("/broken/check-then-act/"), effects=widgets_and_mails)

    message = broken_message(endpoints.check_race, endpoint)

    assert re.search(
        r"8 requests at once: widgets: the effect (is wrong|was ap)", message
    )
    assert "mails:" not in message


def logged_in(name):
    """A plain Django test client logged in as ``once-<name>``, for the
    plain Django views (DRF's forced authentication does not reach them)."""
    user, _ = get_user_model()._default_manager.get_or_create(username=f"once-{name}")
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_post_redirect_get_view(check):
    check(widgets("/t/redirect/", client=logged_in))


STREAMED = pytest.mark.parametrize("url", ["/t/stream/", "/t/file/"])


@STREAMED
@pytest.mark.parametrize(
    "check",
    [
        endpoints.check_failed_attempt,
        endpoints.check_failure_at_completion,
        endpoints.check_other_scope,
    ],
    **BY_NAME,
)
def test_the_cases_that_replay_nothing_hold_for_a_streamed_answer(check, url):
    check(widgets(url, client=logged_in))


@STREAMED
def test_a_streamed_answer_lost_is_reported_as_never_kept(url):
    message = broken_message(
        endpoints.check_lost_response, widgets(url, client=logged_in)
    )

    assert "the view ran again" not in message
    assert (
        "the first answer was streamed (StreamingHttpResponse, FileResponse): "
        "the library never keeps a streamed answer" in message
    )
    assert re.search(
        r"first answer: 20[01] (id=|receipt )\d+ \(not replayed\)", message
    )
    assert "retry:        409 {" in message


def test_an_unguarded_view_runs_again_after_a_lost_response():
    message = broken_message(
        endpoints.check_lost_response, widgets("/broken/unguarded/")
    )

    assert message.startswith(
        "Guarantee broken: a retry after a lost response replays the stored "
        "answer and runs nothing.\n"
    )
    assert "the view ran again: effects went 0 → 2 (expected 0 → 1)" in message
    assert "the retry carries no Idempotent-Replayed: true" in message
    assert re.search(r"first answer: 201 \{.*\} \(not replayed\)", message)


@pytest.mark.postgresql
@pytest.mark.parametrize("concurrency", [1, 0])
def test_a_race_of_fewer_than_two_requests_cannot_run(concurrency):
    """One request races nothing: the check-then-act view would pass."""
    endpoint = widgets("/broken/check-then-act/", concurrency=concurrency)

    with pytest.raises(CannotCheck) as refused:
        endpoints.check_race(endpoint)

    assert str(refused.value) == (
        "The proof kit cannot run 'race': it needs at least 2 requests at "
        f"once, and concurrency is {concurrency}; leave it at 8 or raise it."
    )


@pytest.mark.postgresql
def test_a_check_then_act_view_passes_in_sequence_and_loses_the_race():
    check_then_act = widgets("/broken/check-then-act/")
    endpoints.check_lost_response(check_then_act)  # its hand-made replay works

    message = broken_message(endpoints.check_race, check_then_act)

    assert message.startswith(
        "Guarantee broken: identical requests racing on one key make one effect"
    )
    assert re.search(
        r"8 requests at once: the effect (is wrong|was applied twice): "
        r"effects went 2 → ([3-9]|10) \(expected 2 → 3\)",
        message,
    )
    assert re.search(r"\n  [2-8] answers came from running the view, not 1", message)


def notify_fails():
    return mock.patch(
        "tests.testing.broken.notify", side_effect=ConnectionError("it is down")
    )


def test_a_failing_step_after_the_write_answers_500_and_rolls_back():
    endpoints.check_failed_attempt(widgets("/broken/five-hundred/", fail=notify_fails))


@pytest.mark.parametrize(
    "fail, said",
    [
        # A patcher itself, where a function returning one is asked for.
        (notify_fails(), "fail must be a function returning a context manager"),
        # A function that forgot to return its patcher.
        (lambda: None, "fail() returned None, not a context manager"),
    ],
    ids=["a-patcher", "returns-none"],
)
def test_a_fail_that_is_not_a_function_returning_a_context_manager_is_named(fail, said):
    endpoint = widgets("/broken/five-hundred/", fail=fail)

    with pytest.raises(TypeError) as refused:
        endpoints.check_failed_attempt(endpoint)

    assert str(refused.value).startswith(said)
    assert "def fail(self): return mock.patch(" in str(refused.value)


def test_a_view_storing_its_500_keeps_the_half_done_write(settings):
    settings.IDEMPOTENCY = {"STORE_STATUS": "tests.testing.broken.store_everything"}
    endpoint = widgets("/broken/five-hundred/", fail=notify_fails)

    message = broken_message(endpoints.check_failed_attempt, endpoint)

    assert message.startswith(
        "Guarantee broken: a failed attempt leaves no effect, and its retry runs."
    )
    assert "failure: the endpoint's fail(); the attempt answered 500" in message
    assert (
        "the failed attempt left its effect: effects went 1 → 2 (expected 1 → 1)"
        in message
    )
    assert "the retry got the failed attempt's answer, replayed" in message


def test_an_unguarded_view_keeps_the_write_of_a_failed_attempt():
    message = broken_message(
        endpoints.check_failed_attempt, widgets("/broken/unguarded/")
    )

    assert "the attempt raised InjectedFailure" in message
    assert "the failed attempt left its effect" in message


def test_a_view_answering_its_own_400_blocks_the_corrected_retry():
    endpoint = widgets("/broken/bad-request/", invalid_payload={"name": ""})

    message = broken_message(endpoints.check_validation_failure, endpoint)

    assert message.startswith(
        "Guarantee broken: a request that failed validation is not stored: the "
        "corrected retry with the same key runs."
    )
    assert "the corrected retry did not run: 422" in message
    assert "raise ValidationError" in message


def test_a_fingerprint_without_a_field_that_matters_replays_another_payload():
    endpoint = widgets("/broken/excludes-name/", changed_payload={"name": "other"})

    message = broken_message(endpoints.check_payload_mismatch, endpoint)

    assert message.startswith(
        "Guarantee broken: the same key with another payload is refused with 422."
    )
    assert "the reused key answered 201" in message
    assert "(replayed), not 422" in message


def test_one_scope_for_everyone_serves_alice_s_answer_to_bob(settings):
    settings.IDEMPOTENCY = {"SCOPE_RESOLVER": "tests.testing.broken.one_scope_for_all"}

    message = broken_message(endpoints.check_other_scope, widgets())

    assert message.startswith(
        "Guarantee broken: a stored answer is never returned to another scope."
    )
    assert "bob's request with alice's key got alice's stored answer" in message


def test_a_ttl_shorter_than_the_clients_retries_is_reported():
    # @idempotent(ttl=60) on the function view; the client retries for a day.
    endpoint = widgets("/t/function/", retry_horizon=timedelta(days=1))

    message = broken_message(endpoints.check_expiry, endpoint)

    assert message.startswith(
        "Guarantee broken: a key outlives every retry the client can still send."
    )
    assert "the key expires 0:01:00 after the first request" in message
    assert "retries for 1 day, 0:00:00 (retry_horizon)" in message
    assert "effects went 0 → 2 (expected 0 → 1)" in message


def test_a_retry_horizon_in_seconds_is_read_as_the_ttl_options_are():
    """The views' ttl takes seconds or a timedelta; so does retry_horizon
    (it raised TypeError comparing an int with the TTL)."""
    endpoint = widgets("/t/function/", retry_horizon=24 * 3600)

    message = broken_message(endpoints.check_expiry, endpoint)

    assert "retries for 1 day, 0:00:00 (retry_horizon)" in message


def test_a_downstream_key_made_per_attempt_charges_twice():
    message = broken_message(
        endpoints.check_derived_key, charges("/broken/underived-charge/")
    )

    assert message.startswith(
        "Guarantee broken: a step retried after a crash calls downstream with the "
        "same derived key."
    )
    assert f"the retry called {CHARGE} with another key" in message
    assert "the provider sees two requests" in message


def charges_taken():
    """The provider's charges: money taken, the effect a client cares about."""
    return len(provider.charges)


def test_a_late_retry_runs_as_new_though_the_provider_dedupes_its_charge():
    """Past the TTL the view runs again, and derives the same downstream key:
    the provider answers with the first charge instead of taking another."""
    endpoints.check_expiry(replace(charges(), effects=charges_taken))


@pytest.mark.parametrize(
    "check",
    [
        endpoints.check_failed_attempt,
        endpoints.check_failure_at_completion,
        endpoints.check_derived_key,
    ],
    **BY_NAME,
)
def test_a_charge_kept_by_a_failed_attempt_and_deduplicated_on_retry_holds(check):
    """The charge a failed (or dead) attempt made stays at the provider, and
    the retry's call with the same derived key does not repeat it: one charge
    in the end, which is what the guarantee asks."""
    check(replace(charges(), effects=charges_taken))


def test_a_charge_per_attempt_counted_at_the_provider_is_charged_twice():
    endpoint = replace(charges("/broken/underived-charge/"), effects=charges_taken)

    message = broken_message(endpoints.check_derived_key, endpoint)

    assert "the attempt that died left its effect: effects went" in message
    assert "after the retry: the effect was applied twice" in message
    assert f"the retry called {CHARGE} with another key" in message


@pytest.mark.parametrize(
    "check",
    [endpoints.check_derived_key, endpoints.check_downstream_key_scoped],
    **BY_NAME,
)
def test_a_key_passed_positionally_is_not_reported_missing_without_a_hint(check):
    """provider.charge(key, amount) takes its key positionally: with the
    default downstream_key the kit reads none, and must say how to read it
    rather than only that the view sent no key (or shared "None")."""
    endpoint = replace(charges(), downstream_key=None)

    message = broken_message(check, endpoint)

    assert (
        f"{CHARGE} was called without an idempotency key, as downstream_key "
        "reads it (by default, the idempotency_key keyword argument); if the "
        "view passes it otherwise, make downstream_key return it" in message
    )
    assert "with None" not in message


def test_the_clients_own_key_handed_downstream_is_reported():
    message = broken_message(
        endpoints.check_derived_key, charges("/broken/client-key-charge/")
    )

    assert "is the client's Idempotency-Key itself" in message
    assert "request.idempotency.derive(step)" in message


# The mistakes the kit used to pass, or failed with "cannot run".

LEFT_ITS_EFFECT = re.compile(
    r"the failed attempt left its effect: effects went (\d+) → \d+ "
    r"\(expected \1 → \1\)"
)


def top_ups(url="/broken/top-up/", **options) -> Endpoint:
    def top_up():
        return {"wallet": new_widget()["name"], "amount": 500}

    return Endpoint(url=url, payload=top_up, effects=widget_count, **options)


def test_a_field_left_out_of_the_fingerprint_by_mistake_is_found():
    # The probe field of the payload-mismatch case does not find it.
    endpoints.check_payload_mismatch(top_ups())

    message = broken_message(endpoints.check_each_field_fingerprinted, top_ups())

    assert message.startswith(
        "Guarantee broken: every payload field the view does not exclude on "
        "purpose is in the fingerprint: the same key with that field changed is "
        "refused with 422.\n"
    )
    assert re.search(
        r"amount changed \(500 → 501\): the reused key answered 201 .*"
        r"\(replayed\), not 422",
        message,
    )
    assert "wallet changed" not in message
    assert "name it in exclude_fields" in message


def test_a_field_excluded_on_purpose_is_left_alone():
    endpoints.check_each_field_fingerprinted(top_ups(exclude_fields=("amount",)))


def test_nested_fields_are_changed_one_by_one():
    # The view leaves client_ts and meta.sent_at out; meta.device counts.
    def stamped():
        meta = {"sent_at": "2026-01-01T00:00:00Z", "device": "phone"}
        return {**new_widget(), "client_ts": 1, "meta": meta}

    endpoint = Endpoint(url="/t/stamped/", payload=stamped, effects=widget_count)
    endpoints.check_each_field_fingerprinted(
        replace(endpoint, exclude_fields=("client_ts", "meta.sent_at"))
    )

    message = broken_message(endpoints.check_each_field_fingerprinted, endpoint)

    assert "client_ts changed (1 → 2)" in message
    assert 'meta.sent_at changed ("2026-01-01T00:00:00Z" → ' in message
    assert "meta.device changed" not in message
    assert "name changed" not in message


def test_a_downstream_key_built_from_the_client_key_folds_two_scopes_into_one():
    endpoint = charges("/broken/top-up-charge/")
    # Stable across a retry, and not the client's key verbatim: the
    # derived-key case passes it.
    endpoints.check_derived_key(endpoint)

    message = broken_message(endpoints.check_downstream_key_scoped, endpoint)

    assert message.startswith(
        "Guarantee broken: downstream keys are scoped: two scopes sending the "
        "same key call downstream with different keys.\n"
    )
    assert re.search(
        rf"alice's request called {CHARGE} with 'topup-once-scoped-downstream-key-",
        message,
    )
    assert "bob's request called it with 'topup-once-" in message
    assert "request.idempotency.derive(step)" in message


def test_a_view_catching_every_failure_with_a_202_is_caught_by_default():
    # The kit's failure inside the ORM alone does not show it: Django marks
    # the transaction broken, so the library fails the attempt for the view.
    message = broken_message(
        endpoints.check_failed_attempt, widgets("/broken/swallows-everything/")
    )

    assert message.startswith(
        "Guarantee broken: a failure after the view's own writes is never stored "
        "as a success: the attempt fails, leaves no effect, and its retry runs.\n"
    )
    assert (
        "failure: the kit raised as the view's first save completed (post_save "
        "of testapp.Widget); the attempt answered 202" in message
    )
    assert "the view answered 202 although it failed" in message
    assert LEFT_ITS_EFFECT.search(message)
    assert "the retry got the failed attempt's answer, replayed" in message
    assert 'retry: 202 {"status":"accepted"} (replayed)' in message


def test_a_view_answering_202_to_the_users_own_failure_is_named_not_cannot_run():
    endpoint = widgets("/broken/swallows-notify/")
    # The kit's failure at the write is not caught: the default run passes.
    endpoints.check_failed_attempt(endpoint)

    message = broken_message(
        endpoints.check_failed_attempt, replace(endpoint, fail=notify_fails)
    )

    assert message.startswith(
        "Guarantee broken: a failure after the view's own writes is never stored "
        "as a success"
    )
    assert "failure: the endpoint's fail(); the attempt answered 202" in message
    assert LEFT_ITS_EFFECT.search(message)
    assert "the retry got the failed attempt's answer, replayed" in message


def mails_sent():
    return len(mail.outbox)


def test_an_effect_outside_the_transaction_is_left_by_a_failure_at_completion():
    endpoint = Endpoint(url="/broken/mails/", payload=new_widget, effects=mails_sent)
    # The kit's failure at the write comes before the mail.
    endpoints.check_failed_attempt(endpoint)

    message = broken_message(endpoints.check_failure_at_completion, endpoint)

    assert message.startswith(
        "Guarantee broken: a failure after the view's own writes is never stored "
        "as a success"
    )
    assert "failure: the kit raised at the completion" in message
    assert "the attempt raised InjectedFailure" in message
    assert LEFT_ITS_EFFECT.search(message)


def test_a_charge_left_to_on_commit_is_lost_when_the_process_dies_after_the_commit():
    endpoint = Endpoint(
        url="/broken/charges-on-commit/", payload=new_widget, effects=charges_taken
    )
    for check in endpoints.ENDPOINT_CHECKS:  # no other case sees it
        if check is not endpoints.check_crash_after_commit:
            with suppress(pytest.skip.Exception):
                check(endpoint)

    message = broken_message(endpoints.check_crash_after_commit, endpoint)

    assert message.startswith(
        "Guarantee broken: a request whose process dies right after its work "
        "commits has made each effect once"
    )
    assert "the process died just after durable point 1: COMMIT of INSERT INTO" in (
        message
    )
    assert "after the retry: the effect was lost: effects went" in message
    assert "never in transaction.on_commit()" in message


def test_an_unkeyed_view_has_no_completion_to_fail():
    message = broken_message(
        endpoints.check_failure_at_completion, widgets("/broken/unguarded/")
    )

    assert "the kit found no answer being stored to fail" in message
    assert "nothing was stored: is the view keyed?" in message


def test_an_unkeyed_view_fails_the_scope_case_instead_of_passing():
    message = broken_message(endpoints.check_other_scope, widgets("/broken/unguarded/"))

    assert message.startswith(
        "Guarantee broken: a stored answer is never returned to another scope.\n"
    )
    assert "nothing was stored: is the view keyed?" in message


@pytest.mark.parametrize(
    "check",
    [
        endpoints.check_expiry,
        endpoints.check_validation_failure,
        endpoints.check_each_field_fingerprinted,
    ],
    **BY_NAME,
)
def test_an_unkeyed_view_fails_every_case_it_would_pass_for_nothing(check):
    endpoint = widgets("/broken/unguarded/", invalid_payload={"name": ""})

    assert "nothing was stored: is the view keyed?" in broken_message(check, endpoint)


def test_invalid_and_changed_payloads_may_be_functions():
    endpoint = widgets(
        invalid_payload=lambda: {"name": ""},
        changed_payload=lambda: {"name": "another"},
    )

    endpoints.check_validation_failure(endpoint)
    endpoints.check_payload_mismatch(endpoint)


def test_a_case_missing_its_precondition_says_which():
    endpoint = charges("/t/widgets/", payload=new_widget)

    with pytest.raises(CannotCheck) as caught:
        endpoints.check_downstream_key_scoped(endpoint)

    assert str(caught.value) == (
        "The proof kit cannot run 'scoped-downstream-key': it needs the view to "
        f"call downstream, and alice's request never called {CHARGE}"
    )


def test_an_effects_that_is_not_a_count_is_refused_readably():
    """effects() returning the rows instead of counting them (a QuerySet:
    two readings never compare equal) is the kit's misuse, not the view's
    broken guarantee."""
    endpoint = replace(widgets(), effects=lambda: Widget.objects.all())

    with pytest.raises(TypeError) as refused:
        endpoints.check_lost_response(endpoint)

    assert str(refused.value).startswith(
        "effects() must return a number, or a dict of numbers, that grows with "
        "the business effect; it returned <QuerySet"
    )


def test_a_charge_left_to_on_commit_is_lost_though_a_write_follows_it():
    """A write after the answer's commit (the callback noting the charge, a
    middleware logging the request) is a later durable point: dying after
    it loses nothing. The kit dies after the commit that stores the answer."""
    endpoint = Endpoint(
        url="/broken/charges-on-commit-then-notes/",
        payload=new_widget,
        effects=charges_taken,
    )

    message = broken_message(endpoints.check_crash_after_commit, endpoint)

    assert "the process died just after durable point 1: COMMIT of INSERT INTO" in (
        message
    )
    assert "after the retry: the effect was lost: effects went" in message


def widget_to_ship() -> str:
    """The path of a detail route, on a widget of its own for each intent."""
    return f"/sound/widgets/{Widget.objects.create(name='to ship').pk}/ship/"


@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_detail_route_acting_once_on_its_object(check):
    """A request acting on the object its path names (ship this widget) can
    run once per object: each new intent needs a new object, so the url is a
    function, as the payload may be."""
    check(Endpoint(url=widget_to_ship, payload={}, effects=sound.shipped_count))


def test_a_detail_route_swallowing_the_failure_is_failed_on_an_object_of_its_own():
    """The kit fails the view twice, the second time where its own except
    gets the failure: each on an object not shipped yet, or the second would
    only be refused ("already shipped") and prove nothing."""

    def widget_to_ship_badly():
        return widget_to_ship().replace("/sound/", "/broken/")

    endpoint = Endpoint(
        url=widget_to_ship_badly, payload={}, effects=sound.shipped_count
    )

    message = broken_message(endpoints.check_failed_attempt, endpoint)

    assert "it caught the failure and answered a success" in message


def test_a_late_retry_the_view_refuses_itself_passes_the_expiry_case():
    """Past the TTL the key is forgotten and the late retry reaches the view,
    which refuses to ship a shipped widget: nothing ran twice."""
    endpoint = Endpoint(url=widget_to_ship(), payload={}, effects=sound.shipped_count)

    endpoints.check_expiry(endpoint)


FORMS = ["application/x-www-form-urlencoded", "multipart/form-data"]


@pytest.mark.parametrize("content_type", FORMS)
@pytest.mark.parametrize("check", endpoints.ENDPOINT_CHECKS, **BY_NAME)
def test_every_case_holds_for_a_plain_view_reading_a_form(check, content_type):
    check(widgets("/sound/form-widget/", client=logged_in, content_type=content_type))


def stock_to_reserve():
    sku = f"sku-{uuid.uuid4().hex[:12]}"
    Stock.objects.create(sku=sku, on_hand=5)
    return {"sku": sku}


def reserved():
    return Stock.objects.aggregate(total=Sum("reserved"))["total"]


def test_a_steps_view_writing_outside_its_steps_is_failed_after_its_own_write():
    """The kit fails the view after its own first write (an UPDATE, which no
    post_save follows), not after the library's unit claim: there it would
    prove nothing about the view."""
    endpoint = Endpoint(
        url="/broken/reserves-outside-steps/",
        payload=stock_to_reserve,
        effects=reserved,
    )

    message = broken_message(endpoints.check_failed_attempt, endpoint)

    assert 'the view\'s first write (UPDATE "testapp_stock")' in message
    assert LEFT_ITS_EFFECT.search(message)


def test_a_fail_the_view_never_reaches_is_not_taken_for_a_swallowed_failure():
    """fail() patches what the widget view never calls (a patch made where
    the view does not look the function up): nothing failed, so the sound
    view is not said to have caught a failure."""
    endpoint = widgets(fail=notify_fails)

    with pytest.raises(CannotCheck) as refused:
        endpoints.check_failed_attempt(endpoint)

    assert "it needs fail() to make the view fail" in str(refused.value)
    assert "the mock fail() patched in was never called" in str(refused.value)


def test_a_task_sent_once_the_answer_commits_is_reported():
    """The widget count is right in every case; the task sent on commit, out
    of the database, is lost to a process dying right after that commit."""
    endpoint = widgets("/broken/ships-by-task/")

    message = broken_message(endpoints.check_crash_after_commit, endpoint)

    assert message.startswith(
        "Guarantee broken: a request whose process dies right after its work "
        "commits has made each effect once"
    )
    assert "task broken.ship_widget sent straight to the broker" in message
    assert "record() an outbox event" in message
