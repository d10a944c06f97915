"""Webhook bodies: read within the source's limit, and read as a JSON event."""

import json
from urllib.parse import parse_qsl

from idempotency.shared import storable

from .exceptions import BodyTooLarge, EncodedBody, LengthRequired

# The form GitHub sends when a hook's content type is "form": one field,
# payload, holding the url-encoded JSON event.
FORM = "application/x-www-form-urlencoded"


def read(request, limit: int) -> bytes:
    """The raw body as sent; never reads more than ``limit`` + 1 bytes.

    Raises ``BodyRefused`` (411, 413 or 415) for a body that cannot be taken.
    """
    meta = request.META
    coding = meta.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if coding not in ("", "identity"):
        # Refused, not inflated: no bundled provider compresses, one that did
        # might sign the compressed bytes or the inflated ones, and inflating
        # would open a decompression bomb at an unauthenticated endpoint.
        # The header's value is not echoed: unauthenticated text stays out of
        # answers, logs and signals, as a body's does.
        raise EncodedBody("A Content-Encoding other than identity is not accepted.")
    stream = request
    if _chunked(meta):
        # Under ASGI Django already holds the whole body: read the request.
        if "wsgi.input" in meta:
            stream = _wsgi_input(meta)
    else:
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise BodyTooLarge(f"The limit is {limit} bytes.")
    # One byte more than allowed tells an over-long stream from a full one.
    body = _read_upto(stream, limit + 1)
    if len(body) > limit:
        raise BodyTooLarge(f"The limit is {limit} bytes.")
    return body


def json_object(body: bytes, content_type: str | None) -> dict:
    """The JSON object ``body`` carries; raise ``ValueError`` when it has none.

    A form body carries it in its one ``payload`` field (GitHub); any other
    body is the JSON itself. The intake refuses what this refuses (and
    more: ``intake_json_object``) and ``Event.data`` reads the stored body
    through it, so a body accepted at intake always reads when it is
    processed.

    The error says what is wrong in fixed words, never chained: the messages
    of the errors below quote the body (a form field, a byte), and a
    refusal's detail reaches signals, logs and spans, which never carry one.
    """
    return _decoded(_json_text(body, content_type))


def intake_json_object(body: bytes, content_type: str | None) -> dict:
    """``json_object()``, refusing too an object nested deeper than
    ``storable.MAX_DEPTH``: Python's json reads about 1,000 levels from a
    shallow stack, fewer from a worker's deep one, where ``Event.data``
    would then be None for a delivery answered 202."""
    text = _json_text(body, content_type)
    data = _decoded(text)
    # Only a text with more opening brackets than the limit can nest deeper:
    # counting them costs a delivery a microsecond, walking it ~85 µs (3 KB).
    deep = text.count("{") + text.count("[") > storable.MAX_DEPTH
    if deep and storable.nested_too_deeply(data):
        raise ValueError("JSON nested too deeply")
    return data


def _json_text(body: bytes, content_type: str | None) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    if (content_type or "").split(";")[0].strip().lower() == FORM:
        text = _form_payload(text)
    return text


def _decoded(text: str) -> dict:
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _form_payload(text):
    try:
        fields = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ValueError("form body malformed") from None
    if [name for name, _value in fields] != ["payload"]:
        raise ValueError("a form body needs one payload field and no other")
    return fields[0][1]


def _chunked(meta):
    # Content-Length wins when a client sends both (servers refuse that).
    return (
        not meta.get("CONTENT_LENGTH")
        and "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
    )


def _wsgi_input(meta):
    """The stream a chunked body is read from under WSGI.

    Django's WSGIRequest reads CONTENT_LENGTH bytes, 0 when there is none, so
    a chunked body would read as empty (and fail as a bad signature). A WSGI
    server that de-chunks the input and ends it (gunicorn, mod_wsgi) says so
    with ``wsgi.input_terminated``: read that stream to its end. Elsewhere
    the end of the body cannot be found: ask for a Content-Length.
    """
    if not meta.get("wsgi.input_terminated"):
        raise LengthRequired("Send the body with a Content-Length.")
    return meta["wsgi.input"]


def _read_upto(stream, size):
    """Read until ``size`` bytes or the end: a read may return less."""
    chunks = []
    while size > 0:
        chunk = stream.read(size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
