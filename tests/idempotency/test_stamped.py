"""Excluded fields in a real view: a retry with a new client timestamp replays."""

import pytest
from django.test import RequestFactory
from django.test.client import MULTIPART_CONTENT as MULTIPART
from django.test.client import encode_multipart

from idempotency.fingerprint import compute
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


def test_retry_with_a_new_client_timestamp_replays(api):
    api.post("/t/stamped/", {"name": "a", "client_ts": 1}, key="k")
    retry = api.post("/t/stamped/", {"client_ts": 2, "name": "a"}, key="k")

    assert retry["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


FORM = "application/x-www-form-urlencoded"


def _multipart(fields):
    # A new boundary per send, as clients do.
    boundary = f"boundary-{fields['client_ts']}"
    return encode_multipart(boundary, fields), f"{MULTIPART}; boundary={boundary}"


@pytest.mark.parametrize("encoding", ["form", "multipart"])
def test_a_form_retry_with_a_new_client_timestamp_replays(api, encoding):
    """Fields are excluded from a form or multipart body too (Stripe's API
    is form-encoded); the others still count."""

    def send(name, client_ts):
        fields = {"name": name, "client_ts": client_ts}
        if encoding == "form":
            body, content_type = f"name={name}&client_ts={client_ts}", FORM
        else:
            body, content_type = _multipart(fields)
        return api.post("/t/stamped/", body, key="k", content_type=content_type)

    first = send("a", 1)
    retry = send("a", 2)
    other = send("b", 3)

    assert first.status_code == retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert other.status_code == 422
    assert Widget.objects.count() == 1


def test_a_form_without_the_excluded_fields_keeps_its_hash():
    """A form body that sends none of the excluded fields is hashed as sent,
    so keys stored before forms honoured exclude_fields still match."""
    request = RequestFactory().post("/t/stamped/", "b=2&a=%7E1&&c", content_type=FORM)

    assert compute(request, "op", ("client_ts",)) == compute(request, "op")
