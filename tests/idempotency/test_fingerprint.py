import pytest
from django.test import RequestFactory

from idempotency.fingerprint import compute

factory = RequestFactory()


def fingerprint(
    body,
    *,
    path="/orders/",
    content_type="application/json",
    method="post",
    operation="op",
    exclude=(),
):
    request = getattr(factory, method)(path, data=body, content_type=content_type)
    return compute(request, operation, exclude)


def test_json_key_order_and_whitespace_do_not_change_the_hash():
    assert fingerprint('{"a": 1, "b": [1, 2]}') == fingerprint('{"b":[1,2],"a":1}')
    assert fingerprint('{"a": {"y": 1, "x": 2}}') == fingerprint(
        '{\n  "a": {"x": 2, "y": 1}\n}'
    )


def test_json_values_change_the_hash():
    assert fingerprint('{"a": 1}') != fingerprint('{"a": 2}')
    assert fingerprint('{"a": 1}') != fingerprint('{"a": "1"}')


def test_excluded_fields_do_not_change_the_hash():
    exclude = ("client_ts", "meta.sent_at")
    base = fingerprint(
        '{"a": 1, "client_ts": 1, "meta": {"sent_at": 5, "k": 1}}', exclude=exclude
    )
    other = fingerprint(
        '{"a": 1, "client_ts": 2, "meta": {"sent_at": 9, "k": 1}}', exclude=exclude
    )
    assert base == other
    assert base != fingerprint(
        '{"a": 1, "client_ts": 2, "meta": {"k": 2}}', exclude=exclude
    )


def test_query_string_order_does_not_change_the_hash():
    assert fingerprint("{}", path="/o/?b=2&a=1") == fingerprint(
        "{}", path="/o/?a=1&b=2"
    )
    assert fingerprint("{}", path="/o/?a=1") != fingerprint("{}", path="/o/?a=2")


@pytest.mark.parametrize(
    "change",
    [
        {"path": "/other/"},
        {"method": "put"},
        {"operation": "other"},
        {"content_type": "text/plain"},
    ],
)
def test_method_path_operation_and_media_type_change_the_hash(change):
    assert fingerprint("{}") != fingerprint("{}", **change)


def test_the_charset_counts_and_an_absent_one_is_the_default():
    def with_charset(charset):
        return fingerprint("{}", content_type=f"application/json; charset={charset}")

    # The body is decoded with DEFAULT_CHARSET (utf-8) when none is sent.
    assert fingerprint("{}") == with_charset("utf-8") == with_charset("UTF8")
    assert with_charset("latin-1") == with_charset("ISO-8859-1")
    assert with_charset("latin-1") != with_charset("utf-8")


def test_other_media_type_parameters_are_ignored():
    assert fingerprint("{}") == fingerprint(
        "{}", content_type="application/json; profile=order"
    )


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_json_nested_too_deep_is_refused(opening):
    from idempotency.exceptions import BodyTooDeep

    # Past the JSON parser's nesting limit on every supported Python (about
    # 1,000 levels on 3.11, 10,000 on 3.13).
    depth = 100_000
    body = opening * depth + "1" + ("]" if opening == "[" else "}") * depth
    with pytest.raises(BodyTooDeep):
        fingerprint(body)


def test_non_json_bodies_count_as_raw_bytes():
    assert fingerprint("a=1&b=2", content_type="text/plain") != fingerprint(
        "b=2&a=1", content_type="text/plain"
    )
    assert fingerprint("{not json", content_type="application/json") != fingerprint(
        "{not  json", content_type="application/json"
    )


def test_multipart_bodies_already_read_hash_their_fields_and_files():
    from django.core.files.uploadedfile import SimpleUploadedFile

    def multipart(content):
        request = factory.post(
            "/u/", {"name": "x", "file": SimpleUploadedFile("a.txt", content)}
        )
        request.POST  # noqa: B018 - streams the body, as CSRF checks can
        return compute(request, "op")

    assert multipart(b"one") == multipart(b"one")
    assert multipart(b"one") != multipart(b"two")


@pytest.mark.parametrize("method", ["post", "put"])
def test_multipart_boundary_does_not_change_the_hash(method):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test.client import encode_multipart

    def multipart(boundary, name="x", content=b"one"):
        upload = SimpleUploadedFile("a.txt", content)
        body = encode_multipart(boundary, {"name": name, "file": upload})
        return fingerprint(
            body,
            method=method,
            content_type=f"multipart/form-data; boundary={boundary}",
        )

    assert multipart("retry-1") == multipart("retry-2")
    assert multipart("retry-1") != multipart("retry-2", name="y")
    assert multipart("retry-1") != multipart("retry-2", content=b"two")
