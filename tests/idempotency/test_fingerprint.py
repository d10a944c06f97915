import pytest
from django.test import RequestFactory
from rest_framework.request import Request
from rest_framework.versioning import AcceptHeaderVersioning, URLPathVersioning

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


def test_numbers_one_float_stands_for_are_told_apart():
    # A view reading amounts as decimals (json.loads(parse_float=Decimal))
    # sees two amounts here; a float sees one.
    assert fingerprint('{"amount": 0.1}') != fingerprint(
        '{"amount": 0.10000000000000001}'
    )
    assert fingerprint('{"a": 1e400}') != fingerprint('{"a": 2e400}')
    assert fingerprint('{"a": [1e400, 0.1]}') != fingerprint('{"a": [0.1, 1e400]}')
    # Still canonical: the same numbers, in another order or spelling.
    assert fingerprint('{"a": 0.10000000000000001, "b": 1e400}') == fingerprint(
        '{"b": 10E399, "a": 0.100000000000000010}'
    )
    assert fingerprint('{"a": "0.10000000000000001", "b": 1e400}') != fingerprint(
        '{"a": 0.10000000000000001, "b": 1e400}'
    )


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


def test_the_api_version_counts_where_the_url_does_not_carry_it():
    def versioned(scheme, version):
        request = Request(factory.post("/v1/o/", "{}", "application/json"))
        request.version, request.versioning_scheme = version, scheme
        return compute(request, "op")

    unversioned = fingerprint("{}", path="/v1/o/")
    # The path says it already: such keys keep the hash they had.
    assert versioned(URLPathVersioning(), "v1") == unversioned
    assert versioned(AcceptHeaderVersioning(), None) == unversioned
    in_accept = versioned(AcceptHeaderVersioning(), "1")
    assert in_accept != unversioned
    assert in_accept != versioned(AcceptHeaderVersioning(), "2")


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


def test_repeated_query_names_keep_the_order_they_were_sent_in():
    # The view reads the last value: amount=100, then amount=1.
    assert fingerprint("{}", path="/o/?amount=1&amount=100") != fingerprint(
        "{}", path="/o/?amount=100&amount=1"
    )
    assert fingerprint("{}", path="/o/?a=1&b=2&a=3") == fingerprint(
        "{}", path="/o/?b=2&a=1&a=3"
    )


@pytest.mark.parametrize("charset", ["utf-8", "latin-1"])
def test_query_bytes_that_are_not_utf8_hash_apart(charset):
    # Read as latin-1 they are "ÿ" and "þ"; never one replacement character.
    def query(value):
        return fingerprint(
            "{}",
            path=f"/o/?amount={value}",
            content_type=f"application/json; charset={charset}",
        )

    assert query("%FF") != query("%FE")
    assert query("%FF") != query("%EF%BF%BD")


@pytest.mark.parametrize("method", ["post", "put"])
def test_files_of_one_field_keep_the_order_they_were_sent_in(method):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test.client import encode_multipart

    def upload(*names):
        files = [SimpleUploadedFile(name, name.encode()) for name in names]
        body = encode_multipart("b", {"file": files})
        return fingerprint(
            body, method=method, content_type="multipart/form-data; boundary=b"
        )

    # request.FILES["file"] is the last file sent: b.txt, then a.txt.
    assert upload("a.txt", "b.txt") != upload("b.txt", "a.txt")


def _ordinary(name):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test.client import encode_multipart

    files = {
        "name": "scan",
        "note": "n",
        "file": SimpleUploadedFile("a.txt", b"one"),
        "cover": SimpleUploadedFile("c.png", b"two"),
    }
    if name == "json":
        return factory.post(
            "/orders/?sku=A&note=caf%C3%A9&empty=&qty=2",
            data='{"b": [1, 2], "a": "\u00e9"}',
            content_type="application/json",
        )
    if name == "json-latin-1":
        return factory.post(
            "/orders/?name=%C3%A9&a=1",
            data='{"a": 1}',
            content_type="application/json; charset=latin-1",
        )
    if name == "multipart-post":
        return factory.post("/u/?v=2", files)
    if name == "multipart-put":
        body = encode_multipart("b", files)
        return factory.put(
            "/u/?v=2", body, content_type="multipart/form-data; boundary=b"
        )
    return factory.post(
        "/orders/?b=2&a=1", "a=1&b=2", content_type="application/x-www-form-urlencoded"
    )


@pytest.mark.parametrize(
    ("name", "digest"),
    [
        ("json", "1c8ec4e12868bbe464376a0cce6d5e4a69c4602490ecc0f51daa3defdab5bb5c"),
        (
            "json-latin-1",
            "21c162b3a1f7f1ac3117f34ca5bf6e6c535ead08836df16f31b372260776b300",
        ),
        (
            "multipart-post",
            "ed828ebd0849c667c3e5f4e25462f86c7e474447b8138f52393e59630391a460",
        ),
        (
            "multipart-put",
            "bfb36fadc0a4f3252bebf309991875b95dc83502218bb91d5fc7a06f779b75c6",
        ),
        ("form", "75b4a27691541acdfb23f1effe12a9250ecdd88854868de2c0c9063b394a0075"),
    ],
)
def test_ordinary_requests_keep_their_hash(name, digest):
    # Computed before repeated names, a field's several files and non-UTF-8
    # query bytes counted: a key stored then still matches its retry now.
    assert compute(_ordinary(name), "op") == digest
