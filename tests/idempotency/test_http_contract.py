"""The HTTP contract of keyed requests, through the DRF mixin."""

import hashlib
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from idempotency.models import IdempotencyRecord
from tests.testapp import views
from tests.testapp.models import Widget

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def problem(response):
    assert response["Content-Type"] == PROBLEM
    return json.loads(response.content)


def test_first_request_runs_and_stores_its_answer(api):
    response = api.post("/t/widgets/", {"name": "a"}, key="k1")

    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    record = IdempotencyRecord.objects.get()
    assert record.state == "completed"
    assert record.status_code == 201
    assert bytes(record.response_body) == response.content
    assert record.scope.startswith("user:")
    assert record.operation == "widget.create"


def test_retry_replays_status_body_and_headers_without_running(api):
    first = api.post("/t/widgets/", {"name": "a"}, key="k1")
    second = api.post("/t/widgets/", {"name": "a"}, key="k1")

    assert second.status_code == first.status_code == 201
    assert second.content == first.content
    assert second["Content-Type"] == first["Content-Type"]
    assert second["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


def test_keys_differing_only_in_case_are_two_keys(api):
    api.post("/t/widgets/", {"name": "a"}, key="k1")
    other = api.post("/t/widgets/", {"name": "a"}, key="K1")

    assert other.status_code == 201
    assert "Idempotent-Replayed" not in other
    assert Widget.objects.count() == 2


def test_same_key_different_payload_is_422_and_the_view_does_not_run(api):
    api.post("/t/widgets/", {"name": "a"}, key="k1")
    response = api.post("/t/widgets/", {"name": "b"}, key="k1")

    assert response.status_code == 422
    body = problem(response)
    assert body["type"].endswith("/key-reused")
    assert body["status"] == 422
    assert list(Widget.objects.values_list("name", flat=True)) == ["a"]


def test_the_same_bytes_in_another_charset_are_a_different_request(api):
    body = '{"name": "café"}'.encode()  # "cafÃ©" once read as latin-1

    def send(content_type):
        # generic() sends the bytes as given; post() would re-encode them.
        return api.client.generic(
            "POST",
            "/t/widgets/",
            body,
            content_type=content_type,
            headers={"Idempotency-Key": "k1", "Authorization": api.auth},
        )

    first = send("application/json")
    declared = send("application/json; charset=utf-8")
    latin = send("application/json; charset=latin-1")

    assert first.status_code == 201
    assert declared["Idempotent-Replayed"] == "true"
    assert latin.status_code == 422
    assert problem(latin)["type"].endswith("/key-reused")
    assert list(Widget.objects.values_list("name", flat=True)) == ["café"]


def test_same_key_on_another_operation_is_a_different_intent(api):
    api.post("/t/widgets/", {"name": "a"}, key="k1")
    response = api.post("/t/stamped/", {"name": "a"}, key="k1")

    assert response.status_code == 201
    assert Widget.objects.count() == 2


def test_the_same_key_in_another_api_version_is_a_different_request(api):
    # AcceptHeaderVersioning: the version is in no part of the URL.
    v1, v2 = "application/json; version=1", "application/json; version=2"
    first = api.post("/t/versioned/", {"name": "a"}, key="k", Accept=v1)
    other = api.post("/t/versioned/", {"name": "a"}, key="k", Accept=v2)
    retry = api.post("/t/versioned/", {"name": "a"}, key="k", Accept=v1)

    assert first.status_code == 201
    assert other.status_code == 422
    assert problem(other)["type"].endswith("/key-reused")
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert Widget.objects.count() == 1


def test_missing_key_is_400_problem(api):
    response = api.post("/t/widgets/", {"name": "a"})

    assert response.status_code == 400
    assert problem(response)["type"].endswith("/key-missing")
    assert Widget.objects.count() == 0


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "x" * 256,
        "a\x01b",
        "tab\tinside",
        "caf\u00e9",
        '"unterminated',
        '""',
        '"a"b"',
        # The header sent twice: WSGI and ASGI servers join the values with ",".
        "k1,k1",
        "k1,k2",
        '"k1","k1"',
        '"k1", "k1"',
        'k1,"k1"',
    ],
)
def test_malformed_key_is_400_problem_and_nothing_runs(api, raw):
    response = api.post("/t/widgets/", {"name": "a"}, key=raw)

    assert response.status_code == 400
    assert problem(response)["type"].endswith("/key-malformed")
    assert Widget.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0


def test_structured_field_quoted_key_is_the_same_key(api):
    api.post("/t/widgets/", {"name": "a"}, key="abc-123")
    response = api.post("/t/widgets/", {"name": "a"}, key='"abc-123"')

    assert response["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


def test_a_quoted_keys_structured_field_parameters_are_ignored(api):
    """The draft's key is an sf-string item; RFC 8941 items may carry
    parameters, which the draft defines none of: the key is the string."""
    first = api.post("/t/widgets/", {"name": "a"}, key='"abc-123";p=1')
    retry = api.post("/t/widgets/", {"name": "a"}, key='"abc-123"')

    assert first.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert IdempotencyRecord.objects.get().key == "abc-123"


def test_a_comma_is_part_of_a_key_only_in_the_quoted_form(api):
    first = api.post("/t/widgets/", {"name": "a"}, key='"k1,k2"')
    second = api.post("/t/widgets/", {"name": "a"}, key='"k1,k2"')

    assert first.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert IdempotencyRecord.objects.get().key == "k1,k2"


@pytest.mark.django_db(transaction=True)
def test_the_header_sent_twice_to_a_real_server_is_malformed(live_server, user):
    """Through the WSGI server itself, not a test client's prepared environ."""
    import http.client
    from urllib.parse import urlsplit

    from tests.conftest import basic_auth

    connection = http.client.HTTPConnection(urlsplit(live_server.url).netloc)
    body = json.dumps({"name": "a"}).encode()
    connection.putrequest("POST", "/t/widgets/")
    for name, value in [
        ("Authorization", basic_auth(user.username)),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Idempotency-Key", "k1"),
        ("Idempotency-Key", "k1"),
    ]:
        connection.putheader(name, value)
    connection.endheaders(body)
    response = connection.getresponse()

    assert response.status == 400
    assert response.getheader("Content-Type") == PROBLEM
    assert json.loads(response.read())["type"].endswith("/key-malformed")
    connection.close()
    assert Widget.objects.count() == 0


def test_key_of_255_visible_characters_is_accepted(api):
    response = api.post("/t/widgets/", {"name": "a"}, key="~" * 255)

    assert response.status_code == 201


def test_optional_key_runs_unguarded_without_one(api):
    assert api.post("/t/optional/", {"name": "a"}).status_code == 201
    assert api.post("/t/optional/", {"name": "a"}).status_code == 201
    assert IdempotencyRecord.objects.count() == 0
    assert Widget.objects.count() == 2


def test_a_view_pointing_at_its_resource_runs_without_an_optional_key(api):
    """The keys page has perform_create() call
    request.idempotency.set_resource(); with the key optional, a request
    without one must not save the widget and then fail with a 500 (whose
    retry would save a second)."""
    keyless = api.post("/t/optional-pointing/", {"name": "a"})
    keyed = api.post("/t/optional-pointing/", {"name": "b"}, key="k")

    assert keyless.status_code == keyed.status_code == 201
    assert Widget.objects.count() == 2
    record = IdempotencyRecord.objects.get()
    assert record.resource_id == str(json.loads(keyed.content)["id"])


def test_reads_are_not_guarded(api):
    assert api.get("/t/widgets/").status_code == 200
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize("key", [None, "k"])
def test_a_guarded_action_answers_its_safe_methods_unguarded(api, key):
    """An action listed in idempotent_actions that also serves GET answers
    GET and HEAD with or without a key, and stores nothing for them."""
    widget = Widget.objects.create(name="a")
    url = f"/t/confirming/{widget.pk}/confirm/"
    headers = {} if key is None else {"Idempotency-Key": key}

    read = api.get(url, **headers)
    head = api.client.head(url, headers={"Authorization": api.auth, **headers})
    assert read.status_code == head.status_code == 200
    assert read.json() == {"name": "a"}
    assert IdempotencyRecord.objects.count() == 0
    # Its POST is still guarded.
    assert api.post(url, {}).status_code == 400
    assert api.post(url, {}, key="k2").status_code == 201
    assert api.post(url, {}, key="k2")["Idempotent-Replayed"] == "true"


def test_a_request_failing_validation_is_not_saved_and_the_corrected_retry_runs(api):
    invalid = api.post("/t/widgets/", {"nome": "typo"}, key="k1")
    assert invalid.status_code == 400
    assert IdempotencyRecord.objects.count() == 0

    corrected = api.post("/t/widgets/", {"name": "a"}, key="k1")
    assert corrected.status_code == 201
    assert "Idempotent-Replayed" not in corrected
    assert list(Widget.objects.values_list("name", flat=True)) == ["a"]
    assert IdempotencyRecord.objects.get().state == "completed"


def test_the_same_invalid_request_runs_again_and_is_refused_again(api):
    first = api.post("/t/widgets/", {"nome": "typo"}, key="k1")
    second = api.post("/t/widgets/", {"nome": "typo"}, key="k1")

    assert first.status_code == second.status_code == 400
    assert second.content == first.content
    assert "Idempotent-Replayed" not in second
    assert IdempotencyRecord.objects.count() == 0


def test_a_body_the_parser_refuses_is_not_saved(api):
    unparsable = api.post("/t/widgets/", b'{"name": ', key="k1")
    assert unparsable.status_code == 400
    assert IdempotencyRecord.objects.count() == 0

    assert api.post("/t/widgets/", {"name": "a"}, key="k1").status_code == 201


def test_a_media_type_the_view_cannot_parse_is_not_saved(api):
    wrong = api.post("/t/widgets/", b"name=a", key="k1", content_type="text/plain")
    assert wrong.status_code == 415
    assert IdempotencyRecord.objects.count() == 0

    # The client fixes its Content-Type and retries with the same key.
    assert api.post("/t/widgets/", {"name": "a"}, key="k1").status_code == 201


# Past the JSON parser's nesting limit on every supported Python (about 1,000
# levels on 3.11, 10,000 on 3.13): what no parser reads is a 400, never a 500.
TOO_DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_keyed_body_nested_too_deep_is_a_400_problem(api):
    response = api.post("/t/widgets/", TOO_DEEP, key="k1")

    assert response.status_code == 400
    assert problem(response)["type"].endswith("/body-too-deep")
    assert IdempotencyRecord.objects.count() == 0
    assert Widget.objects.count() == 0


def test_an_unkeyed_body_nested_too_deep_is_a_400_problem_from_the_parser(api):
    """No key, so no fingerprint: the view's own parse of request.data refuses."""
    response = api.post("/t/optional/", TOO_DEEP)

    assert response.status_code == 400
    assert problem(response)["type"].endswith("/body-too-deep")
    assert Widget.objects.count() == 0


def _upload(api, method, *, boundary, content, key="k1"):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test.client import encode_multipart

    body = encode_multipart(
        boundary, {"name": "scan", "file": SimpleUploadedFile("scan.bin", content)}
    )
    return api.client.generic(
        method,
        "/t/upload/",
        body,
        content_type=f"multipart/form-data; boundary={boundary}",
        headers={"Idempotency-Key": key, "Authorization": api.auth},
    )


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_keyed_upload_is_read_as_the_view_reads_it_not_held_in_memory(
    api, settings, method
):
    """Past DATA_UPLOAD_MAX_MEMORY_SIZE, as an unkeyed upload may be."""
    five_mb = bytes(range(256)) * (5 * 1024 * 4)
    assert len(five_mb) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    first = _upload(api, method, boundary="first-send", content=five_mb)
    retry = _upload(api, method, boundary="another-boundary", content=five_mb)
    other = _upload(api, method, boundary="first-send", content=five_mb[:-1] + b"!")

    assert first.status_code == 201
    assert first.json()["size"] == len(five_mb)
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert other.status_code == 422
    assert problem(other)["type"].endswith("/key-reused")
    assert Widget.objects.count() == 1


def _raw_upload(api, content, key="k1", content_type="application/octet-stream"):
    return api.client.put(
        "/t/raw/scan.bin/",
        content,
        content_type=content_type,
        headers={
            "Idempotency-Key": key,
            "Authorization": api.auth,
            "Content-Disposition": "attachment; filename=scan.bin",
        },
    )


@pytest.mark.parametrize(
    "content_type", ["application/octet-stream", "application/json"]
)
def test_a_keyed_raw_upload_is_streamed_not_held_in_memory(api, settings, content_type):
    """DRF's FileUploadParser streams a raw body past DATA_UPLOAD_MAX_MEMORY_SIZE
    for an unkeyed upload, whatever its media type (a JSON file too): a keyed
    one is not refused there either."""
    five_mb = bytes(range(256)) * (5 * 1024 * 4)
    assert len(five_mb) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    first = _raw_upload(api, five_mb, content_type=content_type)
    retry = _raw_upload(api, five_mb, content_type=content_type)
    other = _raw_upload(api, five_mb[:-1] + b"!", content_type=content_type)

    assert first.status_code == 201
    assert first.json()["size"] == len(five_mb)
    assert first.json()["sha256"] == hashlib.sha256(five_mb).hexdigest()
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert other.status_code == 422
    assert Widget.objects.count() == 1


def test_a_multipart_body_sent_to_a_raw_upload_view_is_fingerprinted(api):
    """FileUploadParser takes any media type, multipart too (curl -F), and
    answers plain dicts where MultiPartParser answers QueryDicts: the
    fingerprint read them as QueryDicts and answered 500."""

    def send(content):
        upload = SimpleUploadedFile("scan.bin", content)
        body = encode_multipart(BOUNDARY, {"file": upload})
        return _raw_upload(api, body, content_type=MULTIPART_CONTENT)

    first = send(b"scan")
    retry = send(b"scan")
    other = send(b"another scan")

    assert first.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == first.content
    assert other.status_code == 422
    assert Widget.objects.count() == 1


def test_a_raw_body_hashes_the_same_held_or_streamed(api, settings):
    """A retry streamed past the limit is the request held below it, so keys
    stored before keep matching their retries."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None
    first = _raw_upload(api, b"scan" * 100)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    retry = _raw_upload(api, b"scan" * 100)

    assert first.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", "name=" + "a" * 200),
        ("application/json", json.dumps({"name": "a" * 200})),
    ],
)
def test_a_body_too_large_to_hold_is_refused_before_any_claim(
    api, settings, content_type, body
):
    """DRF's JSON and form parsers read request.body, which refuses it, keyed
    or not: the refusal comes before the claim, so the corrected retry runs."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100

    refused = api.post("/t/widgets/", body, key="k", content_type=content_type)
    corrected = api.post("/t/widgets/", {"name": "a"}, key="k")

    assert refused.status_code == 400
    assert corrected.status_code == 201
    assert Widget.objects.count() == 1


def test_other_client_errors_are_stored_and_replayed(api):
    views.faults["402"] = 1
    first = api.post("/t/widgets/", {"name": "a"}, key="k1")
    second = api.post("/t/widgets/", {"name": "a"}, key="k1")

    assert first.status_code == second.status_code == 402
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"


def test_anonymous_keyed_request_is_refused_unless_the_view_opts_in():
    from tests.conftest import ApiClient

    anonymous = ApiClient()
    refused = anonymous.post("/t/closed/", {"name": "a"}, key="k1")
    assert refused.status_code == 403
    assert problem(refused)["type"].endswith("/anonymous-key")

    first = anonymous.post("/t/anonymous/", {"name": "a"}, key="k1")
    second = anonymous.post("/t/anonymous/", {"name": "a"}, key="k1")
    assert first.status_code == 201
    assert second["Idempotent-Replayed"] == "true"
    assert IdempotencyRecord.objects.get().scope == "anonymous"
    assert Widget.objects.count() == 1


def test_set_cookie_is_never_stored_or_replayed_and_location_is(api, user):
    api.client.force_login(user)
    first = api.client.post(
        "/t/plain/",
        data='{"name": "a"}',
        content_type="application/json",
        headers={"Idempotency-Key": "k1"},
    )
    second = api.client.post(
        "/t/plain/",
        data='{"name": "a"}',
        content_type="application/json",
        headers={"Idempotency-Key": "k1"},
    )

    assert "session_hint" in first.cookies
    record = IdempotencyRecord.objects.get()
    assert set(record.response_headers) == {"Content-Type", "Location"}
    assert "session_hint" not in second.cookies
    assert second["Location"] == first["Location"]
    assert second["Idempotent-Replayed"] == "true"


def test_resource_pointer_is_recorded(api):
    response = api.post("/api/orders/", {"sku": "A", "quantity": 1}, key="k1")

    record = IdempotencyRecord.objects.get()
    assert (record.resource_type, record.resource_id) == (
        "testapp.order",
        str(response.json()["id"]),
    )


def test_problem_type_uris_are_stable(api, settings):
    settings.IDEMPOTENCY = {"PROBLEM_BASE_URI": "https://example.test/p/"}
    response = api.post("/t/widgets/", {"name": "a"})

    assert problem(response)["type"] == "https://example.test/p/key-missing"


def test_configured_header_name_is_read(api, settings):
    settings.IDEMPOTENCY = {"HEADER": "X-Request-Key"}
    first = api.post("/t/widgets/", {"name": "a"}, **{"X-Request-Key": "k"})
    second = api.post("/t/widgets/", {"name": "a"}, **{"X-Request-Key": "k"})

    assert first.status_code == 201
    assert second["Idempotent-Replayed"] == "true"


def test_a_header_name_no_request_can_carry_is_refused_at_first_use(api, settings):
    """Servers drop a header whose name has an underscore, and Django names
    the ones it gets with dashes: such a key is never read, and a view taking
    an optional key would run every retry again."""
    settings.IDEMPOTENCY = {"HEADER": "Idempotency_Key"}
    for _attempt in range(2):
        with pytest.raises(ImproperlyConfigured, match="servers drop"):
            api.post("/t/optional/", {"name": "a"}, **{"Idempotency_Key": "k"})

    assert Widget.objects.count() == 0


@pytest.mark.parametrize("charset", ["base64", "rot13", "bz2"])
def test_a_json_body_in_a_charset_that_is_no_text_encoding_is_no_server_error(
    api, user, charset
):
    """Django accepts any charset codecs knows, bytes-to-bytes codecs
    included; the fingerprint cannot decode the body with one. DRF's parser
    refuses it (400, not saved); a plain view reading the bytes itself runs
    and replays."""
    content_type = f"application/json; charset={charset}"
    body = b'{"name": "a"}'
    drf = [
        api.client.generic(
            "POST",
            "/t/widgets/",
            body,
            content_type=content_type,
            headers={"Idempotency-Key": "k1", "Authorization": api.auth},
        )
        for _ in range(2)
    ]
    api.client.force_login(user)
    plain = [
        api.client.generic(
            "POST",
            "/t/plain-class/",
            body,
            content_type=content_type,
            headers={"Idempotency-Key": "k2"},
        )
        for _ in range(2)
    ]

    assert [answer.status_code for answer in drf] == [400, 400]
    assert not IdempotencyRecord.objects.filter(key="k1").exists()
    assert [answer.status_code for answer in plain] == [201, 201]
    assert plain[1]["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1


def _posted_twice(client, path, body, content_type, headers):
    return [
        client.generic("POST", path, body, content_type=content_type, headers=headers)
        for _ in range(2)
    ]


@pytest.mark.parametrize("charset", ["base64", "bz2"])
def test_a_multipart_body_in_a_charset_that_is_no_text_encoding_is_no_server_error(
    api, user, charset
):
    """Parsing such a body (request.POST) raises in Django's parser: the
    fingerprint must not parse it. A plain view reading the bytes itself runs
    and replays; DRF's parser could not read it either (400, not saved)."""
    content_type = f"multipart/form-data; boundary=x; charset={charset}"
    body = b'--x\r\nContent-Disposition: form-data; name="name"\r\n\r\na\r\n--x--\r\n'
    drf_headers = {"Idempotency-Key": "k1", "Authorization": api.auth}
    drf = _posted_twice(api.client, "/t/widgets/", body, content_type, drf_headers)
    api.client.force_login(user)
    plain_headers = {"Idempotency-Key": "k2"}
    plain = _posted_twice(api.client, "/t/raw-body/", body, content_type, plain_headers)

    assert {answer.status_code for answer in drf} == {400}
    assert not IdempotencyRecord.objects.filter(key="k1").exists()
    assert [answer.status_code for answer in plain] == [201, 201]
    assert plain[1]["Idempotent-Replayed"] == "true"
    assert Widget.objects.count() == 1
