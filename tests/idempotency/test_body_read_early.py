"""A permission that reads ``request.data`` runs before the claim: through a
parser that reads the stream itself (one of one's own, FileUploadParser) it
used to leave the fingerprint no body (``RawPostDataException``, a 500)."""

import hashlib

import pytest

from idempotency.exceptions import IdempotencyConfigurationError
from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db


def note(api, text, key="k", path="/t/note/"):
    return api.post(path, text, key=key, content_type="text/plain")


def test_a_body_a_permission_read_first_is_fingerprinted_by_the_mixin(api):
    first = note(api, "milk")
    retry = note(api, "milk")
    other = note(api, "eggs")

    assert first.status_code == 201
    assert first.json()["name"] == "milk"
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert other.status_code == 422
    assert note(api, "forbidden milk", key="k2").status_code == 403
    assert list(Widget.objects.values_list("name", flat=True)) == ["milk"]


def _raw_upload(api, content, key="k"):
    return api.client.put(
        "/t/checked-raw/scan.bin/",
        content,
        content_type="application/octet-stream",
        headers={
            "Idempotency-Key": key,
            "Authorization": api.auth,
            "Content-Disposition": "attachment; filename=scan.bin",
        },
    )


def test_an_upload_a_permission_read_first_is_fingerprinted_by_the_mixin(api):
    content = bytes(range(256)) * 8

    first = _raw_upload(api, content)
    retry = _raw_upload(api, content)
    other = _raw_upload(api, content[:-1] + b"!")

    assert first.status_code == 201
    assert first.json()["sha256"] == hashlib.sha256(content).hexdigest()
    assert retry["Idempotent-Replayed"] == "true"
    assert other.status_code == 422
    assert Widget.objects.count() == 1


def test_an_upload_too_large_to_hold_that_a_permission_read_first_is_refused(
    api, settings
):
    # Past DATA_UPLOAD_MAX_MEMORY_SIZE the body is streamed, not held: once
    # the permission's parser has read it, no bytes are left to fingerprint.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    with pytest.raises(IdempotencyConfigurationError, match="read before its key"):
        _raw_upload(api, bytes(2000))

    assert not IdempotencyRecord.objects.exists()
    assert not Widget.objects.exists()


def test_a_decorated_view_whose_body_a_permission_read_first_is_refused(api):
    # @idempotent runs inside the DRF handler, after the permission: the body
    # is gone, and the error says so, naming the way out.
    with pytest.raises(IdempotencyConfigurationError, match="read before its key"):
        note(api, "milk", path="/t/note-function/")

    assert not IdempotencyRecord.objects.exists()
    assert not Widget.objects.exists()
