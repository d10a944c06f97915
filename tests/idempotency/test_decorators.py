"""``@idempotent`` on APIView methods, @api_view functions and plain views."""

from datetime import timedelta

import pytest
from django.urls import resolve
from rest_framework.decorators import api_view
from rest_framework.test import APIRequestFactory, force_authenticate

from idempotency.decorators import idempotent
from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget
from tests.testapp.views import WidgetViewSet

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/t/method/", "/t/function/"])
def test_drf_views_replay_after_content_negotiation(api, path):
    first = api.post(path, {"name": "a"}, key="k", Accept="application/json")
    second = api.post(path, {"name": "a"}, key="k", Accept="application/json")

    assert first.status_code == 201
    assert first["Content-Type"] == "application/json"
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("accept", ["text/html", "application/json"])
def test_browsable_api_page_is_sent_but_the_apis_rendering_is_stored(api, accept):
    first = api.post("/t/method/", {"name": "a"}, key="k", Accept="text/html")
    replay = api.post("/t/method/", {"name": "a"}, key="k", Accept=accept)

    assert first.status_code == 201
    assert first["Content-Type"].startswith("text/html")
    # Whatever the retry accepts, it gets the stored JSON and its Content-Type.
    assert replay["Idempotent-Replayed"] == "true"
    assert replay["Content-Type"] == "application/json"
    assert replay.json() == {"id": Widget.objects.get().pk}


def test_the_stored_rendering_of_a_browsable_api_page_is_the_apis_own(api):
    page = api.post("/t/method/", {"name": "a"}, key="k", Accept="text/html")
    replay = api.post("/t/method/", {"name": "a"}, key="k")

    assert page["Content-Type"].startswith("text/html")
    # As a JSON client gets it first: not indented as the page shows it.
    assert replay.content == b'{"id":%d}' % Widget.objects.get().pk


def test_a_browsable_api_page_of_a_204_stores_the_apis_204(api):
    widget = Widget.objects.create(name="a")

    def delete(accept):
        headers = {"Idempotency-Key": "k", "Authorization": api.auth}
        return api.client.delete(
            f"/t/deleting/{widget.pk}/", headers={**headers, "Accept": accept}
        )

    page = delete("text/html")
    replay = delete("application/json")

    assert page.status_code == 200  # the browsable API shows a 204 as a page
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.status_code == 204
    assert replay.content == b""
    assert not Widget.objects.exists()


def test_decorated_api_view_still_authenticates_first():
    from tests.conftest import ApiClient

    answer = ApiClient().post("/t/function/", {"name": "a"}, key="k")

    assert answer.status_code in (401, 403)
    assert Widget.objects.count() == 0


def test_plain_django_view_is_guarded(user, client):
    client.force_login(user)
    kwargs = {"content_type": "application/json", "headers": {"Idempotency-Key": "k"}}
    first = client.post("/t/plain/", '{"name": "a"}', **kwargs)
    second = client.post("/t/plain/", '{"name": "a"}', **kwargs)

    assert first.status_code == second.status_code == 201
    assert second.content == first.content
    assert Widget.objects.count() == 1


def test_plain_django_class_based_view_method_is_guarded(user, client):
    """A Django View's method gets the view first, like an APIView's, but
    is not DRF's: it is run and answered as a plain Django view."""
    client.force_login(user)
    kwargs = {"content_type": "application/json", "headers": {"Idempotency-Key": "k"}}
    first = client.post("/t/plain-class/", '{"name": "a"}', **kwargs)
    retry = client.post("/t/plain-class/", '{"name": "a"}', **kwargs)

    assert first.status_code == retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert Widget.objects.count() == 1


@pytest.mark.parametrize("method", ["get", "head", "options", "trace"])
@pytest.mark.parametrize("key", [None, "k"])
def test_safe_methods_pass_through_a_decorated_view_untouched(
    user, client, method, key
):
    """A key means nothing on a safe method (as at Stripe): the view answers
    it as if undecorated, with or without a key, and nothing is stored."""
    client.force_login(user)
    headers = {} if key is None else {"Idempotency-Key": key}
    answer = getattr(client, method)("/t/plain/", headers=headers)

    assert answer.status_code == 405  # the view's own answer to anything but POST
    assert not answer.has_header("Idempotent-Replayed")
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize("key", [None, "k"])
def test_an_api_view_serving_get_answers_it_without_a_key(api, key):
    url = "/t/function-reads/"
    api.post(url, {"name": "a"}, key="k")
    headers = {} if key is None else {"Idempotency-Key": key}

    first, second = api.get(url, **headers), api.get(url, **headers)
    api.post(url, {"name": "b"}, key="k2")

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"count": 1}
    assert api.get(url, **headers).json() == {"count": 2}
    assert IdempotencyRecord.objects.count() == 2  # the two POSTs'


def test_decorator_outside_api_view_is_refused_at_import_time():
    @api_view(["POST"])
    def view(request):
        raise AssertionError

    with pytest.raises(IdempotencyConfigurationError, match="below @api_view"):
        idempotent("op")(view)


def test_unknown_mode_is_refused_naming_the_operation():
    with pytest.raises(IdempotencyConfigurationError, match="'op'"):
        idempotent("op", mode="eventually")(lambda request: None)


SWITCHED_OFF_TTLS = [
    0,
    0.0,
    -60,
    timedelta(0),
    timedelta(seconds=-1),
    float("nan"),
    float("inf"),
    timedelta(days=3654),  # over ten years: milliseconds given as seconds
    0.000001,  # under the one-minute floor: gone before a retry arrives
    59,
    "3600",
    True,
]


@pytest.mark.parametrize("ttl", SWITCHED_OFF_TTLS)
def test_a_ttl_that_would_switch_the_guarantee_off_is_refused_naming_the_operation(
    ttl,
):
    with pytest.raises(IdempotencyConfigurationError, match="ttl of 'op'"):
        idempotent("op", ttl=ttl)(lambda request: None)


def test_a_ttl_is_used_as_given(api):
    response = api.post("/t/function/", {"name": "a"}, key="k")

    assert response.status_code == 201
    record = IdempotencyRecord.objects.get()
    # expires_at is set when the claim is built, a moment before created_at.
    lifetime = record.expires_at - record.created_at
    assert timedelta(seconds=59) < lifetime <= timedelta(seconds=60)


@pytest.mark.parametrize("ttl", SWITCHED_OFF_TTLS)
def test_mixin_with_a_ttl_that_would_switch_the_guarantee_off_names_the_class(ttl):
    from tests.testapp.views import WidgetViewSet

    # Refused when the class is built, not on each request.
    with pytest.raises(
        IdempotencyConfigurationError, match=r"ShortLivedViewSet\.idempotency_ttl"
    ):
        type("ShortLivedViewSet", (WidgetViewSet,), {"idempotency_ttl": ttl})


def test_mixin_options_given_to_as_view_are_checked_too():
    from tests.testapp.views import WidgetViewSet

    with pytest.raises(
        IdempotencyConfigurationError, match=r"WidgetViewSet\.idempotency_ttl"
    ):
        WidgetViewSet.as_view({"post": "create"}, idempotency_ttl=0)


def test_mixin_options_are_checked_once_not_per_request(api, monkeypatch):
    from idempotency import claims

    # Build the views first: run alone, this test would import the URLconf,
    # and the classes' own checks would count as the request's.
    resolve("/t/widgets/")
    checked = []
    monkeypatch.setattr(claims, "view_ttl", lambda *args: checked.append(args))
    assert api.post("/t/widgets/", {"name": "a"}, key="k").status_code == 201
    assert checked == []


@pytest.mark.parametrize("option", ["required", "allow_anonymous"])
@pytest.mark.parametrize("value", [None, "false", "no", 0, 1])
def test_a_switch_that_is_not_a_bool_is_refused_naming_the_operation(option, value):
    """None or "false" would read as a choice: required=None ran keyless
    requests unguarded, allow_anonymous="false" put anonymous clients in one
    shared scope."""
    with pytest.raises(IdempotencyConfigurationError, match=f"{option} of 'op'"):
        idempotent("op", **{option: value})(lambda request: None)


@pytest.mark.parametrize("option", ["required", "allow_anonymous"])
@pytest.mark.parametrize("value", [None, "false"])
def test_mixin_with_a_switch_that_is_not_a_bool_names_the_class(option, value):
    from tests.testapp.views import WidgetViewSet

    with pytest.raises(
        IdempotencyConfigurationError, match=rf"LooseViewSet\.idempotency_{option}"
    ):
        type("LooseViewSet", (WidgetViewSet,), {f"idempotency_{option}": value})
    with pytest.raises(IdempotencyConfigurationError, match=option):
        WidgetViewSet.as_view({"post": "create"}, **{f"idempotency_{option}": value})


@pytest.mark.parametrize("fields", ["sku", b"sku", [""], ["sku", 1], 5])
def test_exclude_fields_that_are_not_a_list_of_names_are_refused(fields):
    # A bare "sku" would leave out the fields "s", "k" and "u".
    with pytest.raises(IdempotencyConfigurationError, match="list of field names"):
        idempotent("op", exclude_fields=fields)(lambda request: None)


def test_mixin_with_exclude_fields_as_a_string_is_refused_when_built():
    from tests.testapp.views import WidgetViewSet

    with pytest.raises(IdempotencyConfigurationError, match="StringFieldsViewSet"):
        type(
            "StringFieldsViewSet",
            (WidgetViewSet,),
            {"idempotency_exclude_fields": "name"},
        )


def test_mixin_with_unknown_mode_names_the_class():
    from tests.testapp.views import WidgetViewSet

    with pytest.raises(IdempotencyConfigurationError, match="SometimesViewSet"):
        type("SometimesViewSet", (WidgetViewSet,), {"idempotency_mode": "sometimes"})


def test_the_mixin_after_the_drf_view_class_is_refused_when_built():
    # APIView.initial() does not call super(): the mixin would never run.
    from rest_framework import viewsets

    from idempotency.mixins import IdempotencyMixin

    with pytest.raises(IdempotencyConfigurationError, match="put it first"):
        type("BackwardsViewSet", (viewsets.ModelViewSet, IdempotencyMixin), {})


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ("create", "tuple of action or method names"),  # matched letter by letter
        ([1], "tuple of action or method names"),
        (("post",), "names no action or handler"),  # a viewset's is "create"
        (("creat",), "names no action or handler"),
    ],
)
def test_idempotent_actions_that_guard_nothing_are_refused(actions, message):
    from tests.testapp.views import WidgetViewSet

    view = type("TypoViewSet", (WidgetViewSet,), {"idempotent_actions": actions})
    with pytest.raises(IdempotencyConfigurationError, match=message):
        view.as_view({"post": "create"})


def test_no_idempotent_actions_is_a_subclass_guarding_nothing():
    from tests.testapp.views import WidgetViewSet

    view = type("UnguardedViewSet", (WidgetViewSet,), {"idempotent_actions": ()})
    view.as_view({"post": "create"})


def test_a_base_class_without_the_actions_yet_is_not_refused():
    # Checked where views are made (as_view), not on an abstract base.
    from rest_framework import viewsets

    from idempotency.mixins import IdempotencyMixin

    base = type(
        "KeyedBase",
        (IdempotencyMixin, viewsets.GenericViewSet),
        {"idempotent_actions": ("create",)},
    )
    type("Concrete", (base,), {"create": lambda self, request: None}).as_view(
        {"post": "create"}
    )


class WeekLongKeys(WidgetViewSet):
    """Keys page: each attribute of the mixin has a get_*() hook."""

    idempotency_operation = "widget.create.week"

    def get_idempotency_ttl(self):
        return timedelta(days=7)

    def get_idempotency_required(self):
        return "X-Require-Key" in self.request.headers


class NoRetention(WidgetViewSet):
    idempotency_operation = "widget.create.no-retention"

    def get_idempotency_ttl(self):
        return 0


def _create(view, user, **headers):
    request = APIRequestFactory().post(
        "/t/widgets/", {"name": "a"}, format="json", headers=headers
    )
    force_authenticate(request, user)
    return view.as_view({"post": "create"})(request)


def test_the_mixins_option_hooks_decide_per_request(user):
    answer = _create(WeekLongKeys, user, **{"Idempotency-Key": "k"})
    keyless = _create(WeekLongKeys, user)
    refused = _create(WeekLongKeys, user, **{"X-Require-Key": "1"})

    assert answer.status_code == keyless.status_code == 201
    record = IdempotencyRecord.objects.get()
    lifetime = record.expires_at - record.created_at
    assert abs(lifetime - timedelta(days=7)) < timedelta(minutes=1)
    assert refused.status_code == 400
    assert Widget.objects.count() == 2


def test_a_hook_returning_what_would_switch_the_guarantee_off_is_refused(user):
    with pytest.raises(
        IdempotencyConfigurationError, match=r"NoRetention\.get_idempotency_ttl\(\)"
    ):
        _create(NoRetention, user, **{"Idempotency-Key": "k"})
    assert not Widget.objects.exists()
