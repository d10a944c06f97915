"""The demo's landing page tells a newcomer where to go."""

import pytest

pytestmark = pytest.mark.django_db


def test_the_landing_page_links_the_api_schema_and_console(client):
    page = client.get("/")

    assert page.status_code == 200
    html = page.content.decode()
    for url in ("/api/orders/", "/api/schema/", "/admin/", "/admin/ops/"):
        assert f'href="{url}"' in html
    # The curl commands carry absolute URLs, ready to paste.
    assert "http://testserver/api/orders/" in html
    assert "Idempotency-Key: order-42" in html


def test_every_link_on_the_landing_page_answers(client, admin_user):
    import re

    client.force_login(admin_user)
    html = client.get("/").content.decode()
    for url in set(re.findall(r'href="(/[^"]*)"', html)):
        assert client.get(url).status_code in (200, 302), url
