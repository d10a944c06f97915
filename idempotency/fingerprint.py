"""The request fingerprint: same intent, same hash."""

import hashlib
import json
from urllib.parse import parse_qsl, urlencode

from django.http.request import RawPostDataException


def compute(request, operation: str, exclude_fields=()) -> str:
    """Return the SHA-256 hex of the request's canonical form.

    Covers the method, operation, path, sorted query string, media type and
    body. JSON bodies are canonicalised (sorted keys, no whitespace) after
    dropping ``exclude_fields`` (top-level or dotted paths), so key order and
    formatting never change the hash; other bodies count as raw bytes.
    """
    django_request = getattr(request, "_request", request)
    media_type = (django_request.content_type or "").lower()
    parts = (
        django_request.method,
        operation,
        django_request.path,
        urlencode(
            sorted(
                parse_qsl(
                    django_request.META.get("QUERY_STRING", ""), keep_blank_values=True
                )
            )
        ),
        media_type,
    )
    digest = hashlib.sha256()
    for part in parts:
        _frame(digest, part.encode())
    _frame(digest, _canonical_body(django_request, media_type, exclude_fields))
    return digest.hexdigest()


def _frame(digest, data: bytes) -> None:
    # Length-prefixed so no two different part sequences share a byte stream.
    digest.update(b"%d:" % len(data))
    digest.update(data)


def _canonical_body(request, media_type: str, exclude_fields) -> bytes:
    try:
        body = request.body
    except RawPostDataException:
        # A multipart body was streamed into request.POST/FILES already.
        return _canonical_form(request)
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            document = json.loads(body)
        except ValueError:
            return body
        for path in exclude_fields:
            _drop(document, path.split("."))
        return json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    return body


def _drop(document, path) -> None:
    head, *rest = path
    if not isinstance(document, dict) or head not in document:
        return
    if rest:
        _drop(document[head], rest)
    else:
        del document[head]


def _canonical_form(request) -> bytes:
    fields = sorted(request.POST.lists())
    files = sorted(
        (name, upload.name, _file_digest(upload))
        for name, uploads in request.FILES.lists()
        for upload in uploads
    )
    return json.dumps([fields, files], separators=(",", ":")).encode()


def _file_digest(upload) -> str:
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()
