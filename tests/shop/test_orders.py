"""The demo shop's order API: one order per intent, whatever the client does."""

from datetime import timedelta

import pytest
from django.db.models import Sum

from idempotency.testing.suites import EndpointSuite
from outbox.testing.events import check_published_twice
from project.shop.models import Order, Stock
from project.shop.tasks import reserve_stock
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = {"sku": "BOOK-1", "quantity": 2}


def reserved():
    return Stock.objects.aggregate(total=Sum("reserved"))["total"]


class TestPlaceOrder(EndpointSuite):
    """The proof kit's failure cases against POST /api/orders/."""

    url = "/api/orders/"
    payload = ORDER
    invalid_payload = {"sku": "BOOK-1", "quantity": 0}
    # The demo's clients retry for an hour at most; keys live a day.
    retry_horizon = timedelta(hours=1)
    # The view calls no other service: no downstream key to derive.
    test_crash_after_the_downstream_call_retries_with_the_same_key = None

    def effects(self):
        return Order.objects.count()


def test_an_order_event_published_twice_reserves_stock_once(api, once_events):
    assert api.post("/api/orders/", ORDER, key="order-1").status_code == 201

    check_published_twice(once_events, {"order.created": reserve_stock}, reserved)


def test_the_answer_is_the_order_placed(api):
    answer = api.post("/api/orders/", ORDER, key="order-1")

    assert answer.status_code == 201
    assert answer.json() == {
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
