"""``@idempotent`` on APIView methods, @api_view functions and plain views."""

import pytest
from rest_framework.decorators import api_view

from idempotency.decorators import idempotent
from idempotency.exceptions import IdempotencyConfigurationError
from tests.testapp.models import Widget

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


def test_decorator_outside_api_view_is_refused_at_import_time():
    @api_view(["POST"])
    def view(request):
        raise AssertionError

    with pytest.raises(IdempotencyConfigurationError, match="below @api_view"):
        idempotent("op")(view)


def test_unknown_mode_is_refused_naming_the_operation():
    with pytest.raises(IdempotencyConfigurationError, match="'op'"):
        idempotent("op", mode="eventually")(lambda request: None)


def test_mixin_with_unknown_mode_names_the_class(api, monkeypatch):
    from tests.testapp import views

    monkeypatch.setattr(views.WidgetViewSet, "idempotency_mode", "sometimes")
    with pytest.raises(IdempotencyConfigurationError, match="WidgetViewSet"):
        api.post("/t/widgets/", {"name": "a"}, key="k")
