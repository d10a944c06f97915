"""The demo shop's order API: one order per intent, whatever the client does."""

import pytest

from project.shop.models import Order
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {"sku": "BOOK-1", "quantity": 2}


def test_response_lost_after_commit_the_retry_replays_byte_for_byte(api):
    lost = api.post("/api/orders/", ORDER, key="order-1")  # never reaches the client
    retry = api.post("/api/orders/", ORDER, key="order-1")

    assert retry.status_code == 201
    assert retry.content == lost.content
    assert retry["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1
    assert retry.json() == {
        "id": Order.objects.get().pk,
        "sku": "BOOK-1",
        "quantity": 2,
        "status": "pending",
    }


def test_create_requires_a_key(api):
    answer = api.post("/api/orders/", ORDER)

    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/problem+json"
    assert Order.objects.count() == 0


def test_invalid_order_is_not_saved_and_the_corrected_retry_places_it(api):
    first = api.post("/api/orders/", {"sku": "X", "quantity": 0}, key="k")
    again = api.post("/api/orders/", {"sku": "X", "quantity": 0}, key="k")
    corrected = api.post("/api/orders/", {"sku": "X", "quantity": 1}, key="k")

    assert first.status_code == again.status_code == 400
    assert "Idempotent-Replayed" not in again
    assert corrected.status_code == 201
    assert Order.objects.get().quantity == 1


def test_users_see_only_their_own_orders(make_user):
    make_user("alice"), make_user("bob")
    alice, bob = ApiClient("alice"), ApiClient("bob")
    mine = alice.post("/api/orders/", ORDER, key="k").json()
    bob.post("/api/orders/", ORDER, key="k")

    listed = alice.get("/api/orders/").json()
    assert [order["id"] for order in listed] == [mine["id"]]
    assert alice.get(f"/api/orders/{mine['id']}/").status_code == 200
    other = Order.objects.exclude(pk=mine["id"]).get()
    assert alice.get(f"/api/orders/{other.pk}/").status_code == 404


def test_anonymous_clients_cannot_order():
    answer = ApiClient().post("/api/orders/", ORDER, key="k")

    assert answer.status_code in (401, 403)
    assert Order.objects.count() == 0


def test_wrong_password_is_401_and_not_stored(user):
    from tests.conftest import basic_auth

    client = ApiClient(user.username)
    client.auth = basic_auth(user.username, "wrong")
    assert client.post("/api/orders/", ORDER, key="k").status_code == 401
    assert (
        ApiClient(user.username).post("/api/orders/", ORDER, key="k").status_code == 201
    )
