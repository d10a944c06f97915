"""Property test: whatever the header and body, the answer is never a 5xx."""

import json

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotency import keys
from idempotency.exceptions import KeyMalformed
from idempotency.models import IdempotencyRecord
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db

# WSGI hands header values over as latin-1 strings.
header_values = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=300),
    st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1),
    st.sampled_from(['"', '""', '"\\', "\x00", "k" * 255, "k" * 256, "k,k"]),
)
bodies = st.one_of(
    st.binary(max_size=300),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=10,
    ).map(lambda value: json.dumps(value).encode()),
    st.text(max_size=120).map(lambda name: json.dumps({"name": name}).encode()),
    # Too deep for the JSON parser (1,100 levels on 3.11; 100,000 anywhere).
    st.sampled_from([b"[" * 1100 + b"]" * 1100, b"[" * 100_000 + b"]" * 100_000]),
)
content_types = st.sampled_from(
    [
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/octet-stream",
        "application/merge-patch+json",
    ]
)


def _key_of(raw):
    try:
        return keys.parse(raw)
    except KeyMalformed:
        return None


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=header_values, body=bodies, content_type=content_types)
def test_no_header_value_or_body_causes_a_server_error(api, key, body, content_type):
    # The database is not reset between examples: each one runs in a savepoint
    # rolled back at its end, so what it asserts on is its own doing.
    with transaction.atomic():
        first = api.post("/t/widgets/", body, key=key, content_type=content_type)
        second = api.post("/t/widgets/", body, key=key, content_type=content_type)
        records = list(IdempotencyRecord.objects.all())
        widgets = Widget.objects.count()
        transaction.set_rollback(True)

    assert first.status_code < 500
    assert second.status_code < 500
    assert "Idempotent-Replayed" not in first
    parsed = _key_of(key)
    if parsed is None:
        for answer in (first, second):
            assert answer.status_code == 400
            assert json.loads(answer.content)["type"].endswith("/key-malformed")
        assert (records, widgets) == ([], 0)
        return
    assert [record.key for record in records] in ([], [parsed])
    if records and records[0].state == "completed":
        assert bytes(records[0].response_body) == first.content
        assert second["Idempotent-Replayed"] == "true"
        assert second.content == first.content
        assert widgets == (1 if first.status_code == 201 else 0)
    else:
        # Not saved (validation failed, a body too deep): the retry ran again.
        assert "Idempotent-Replayed" not in second
        assert second.status_code == first.status_code
        assert widgets == 0
