"""Property test: whatever the header and body, the answer is never a 5xx."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotency.models import IdempotencyRecord

pytestmark = pytest.mark.django_db

# WSGI hands header values over as latin-1 strings.
header_values = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=300),
    st.sampled_from(['"', '""', '"\\', "\x00", "k" * 255, "k" * 256]),
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
    ).map(lambda value: __import__("json").dumps(value).encode()),
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


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=header_values, body=bodies, content_type=content_types)
def test_no_header_value_or_body_causes_a_server_error(api, key, body, content_type):
    first = api.post("/t/widgets/", body, key=key, content_type=content_type)
    second = api.post("/t/widgets/", body, key=key, content_type=content_type)

    assert first.status_code < 500
    assert second.status_code < 500
    if first.status_code in (400, 403) and first["Content-Type"].startswith(
        "application/problem+json"
    ):
        assert second.status_code == first.status_code
    elif IdempotencyRecord.objects.filter(state="completed").exists():
        assert second.content == first.content
