"""The request fingerprint: same intent, same hash."""

import codecs
import decimal
import hashlib
import io
import json
import tempfile
from operator import itemgetter
from urllib.parse import parse_qsl, quote, unquote_to_bytes, urlencode

from django.conf import settings
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.http.request import RawPostDataException
from django.utils.module_loading import import_string
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import FormParser, JSONParser
from rest_framework.request import Request
from rest_framework.versioning import (
    NamespaceVersioning,
    QueryParameterVersioning,
    URLPathVersioning,
)

from .exceptions import BodyTooDeep, IdempotencyConfigurationError

# How much of a streamed body is read at a time (Django's upload chunk size).
_CHUNK_SIZE = 64 * 1024
# DRF's parsers that read request.body (JSON, form), or parse the stream
# through request.POST and FILES (multipart), which the fingerprint reads.
_PARSERS_READING_THE_BODY = (JSONParser, FormParser, parsers.MultiPartParser)
# DRF versioning schemes that read the version from the path or the query
# string, which the fingerprint counts already.
_VERSION_IN_THE_URL = (URLPathVersioning, NamespaceVersioning, QueryParameterVersioning)


def compute(request, operation: str, exclude_fields=()) -> str:
    """Return the SHA-256 hex of the request's canonical form.

    Covers the method, operation, path, query string sorted by name, media
    type with its charset (and the DRF API version the URL does not carry),
    and body. JSON bodies are canonicalised (sorted keys, no
    whitespace) after dropping ``exclude_fields`` (top-level or dotted paths),
    so key order and formatting never change the hash; multipart bodies count
    as their fields and files, whatever the boundary; other bodies count as
    raw bytes (a form's without its excluded fields).
    """
    django_request = _django(request)
    media_type = (django_request.content_type or "").lower()
    encoding = _encoding(django_request)
    query = django_request.META.get("QUERY_STRING", "")
    parts = (
        django_request.method,
        operation,
        django_request.path,
        # Most keyed requests have no query string: skip parsing nothing.
        query and _canonical_query(query),
        _with_version(_with_charset(media_type, encoding), request),
    )
    digest = hashlib.sha256()
    for part in parts:
        _frame(digest, part.encode())
    frames = _canonical_body(request, media_type, encoding, exclude_fields)
    if frames is None:
        _frame_streamed_body(digest, django_request)
    else:
        for frame in frames:
            _frame(digest, frame)
    return digest.hexdigest()


def _django(request):
    # A DRF Request wraps the Django one.
    return getattr(request, "_request", request)


def _encoding(request) -> str:
    """The charset the body's text is read with, by its canonical codec name.

    Django ignores an unknown charset and reads DEFAULT_CHARSET, as it does
    when none is sent, so "utf-8", "UTF8" and no charset are one encoding.
    """
    return codecs.lookup(request.encoding or settings.DEFAULT_CHARSET).name


def _with_charset(media_type: str, encoding: str) -> str:
    # The same bytes in another charset are another text: another intent.
    # The default charset adds nothing, so those hashes stay as they were
    # before the charset counted (keys stored then still match their retries).
    if encoding == codecs.lookup(settings.DEFAULT_CHARSET).name:
        return media_type
    return f"{media_type}; charset={encoding}"


def _with_version(media_type: str, request) -> str:
    """Add the API version DRF read from outside the URL (an Accept header's
    ``version=``, the host name): the same body sent to another version may
    mean another thing, and its answer has that version's shape.

    A request without one keeps its hash. As a media type parameter it can
    come from nowhere else: the client's own parameters, but the charset, do
    not count.
    """
    if not isinstance(request, Request):
        return media_type  # a plain Django view: DRF read no version
    version = getattr(request, "version", None)  # set by APIView.initial()
    scheme = getattr(request, "versioning_scheme", None)
    if version is None or isinstance(scheme, _VERSION_IN_THE_URL):
        return media_type
    return f"{media_type}; version={quote(str(version), safe='')}"


def _canonical_query(query: str) -> str:
    # Sorted by name only, and stably: the view reads the last of a repeated
    # name's values, so their order is part of the request. Bytes that are not
    # UTF-8 stay themselves (surrogateescape both ways): a view reading another
    # charset tells them apart. Other queries hash as they did before.
    pairs = parse_qsl(query, keep_blank_values=True, errors="surrogateescape")
    pairs.sort(key=itemgetter(0))
    return urlencode(pairs, errors="surrogateescape")


def _frame(digest, data: bytes) -> None:
    # Length-prefixed so no two different part sequences share a byte stream.
    digest.update(b"%d:" % len(data))
    digest.update(data)


def _canonical_body(
    request, media_type: str, encoding: str, exclude_fields
) -> tuple[bytes, ...] | None:
    """The body's canonical bytes, in one frame or more; None: a raw body too
    large to hold, which ``_frame_streamed_body`` hashes as it reads it."""
    django_request = _django(request)
    if media_type == "multipart/form-data":
        if not _is_text(encoding):
            return (_unparsable_multipart(request, django_request, encoding),)
        # Clients pick a new boundary for every send, retries included.
        return (_canonical_multipart(request, exclude_fields),)
    if isinstance(request, Request) and _streamed_by_drf(request, django_request):
        return None
    body = _body(django_request)
    if media_type == "application/json" or media_type.endswith("+json"):
        return _canonical_json(body, encoding, exclude_fields)
    if media_type == "application/x-www-form-urlencoded" and exclude_fields:
        return (_without_form_fields(body, encoding, exclude_fields),)
    return (body,)


def _is_text(encoding: str) -> bool:
    # Django takes any charset codecs knows, bytes-to-bytes ones (base64,
    # bz2) included; no parser decodes field names with those. (An empty
    # bytes decodes in any codec: decode one byte.)
    try:
        b"a".decode(encoding, "replace")
    except LookupError:
        return False
    return True


def _unparsable_multipart(request, django_request, encoding: str) -> bytes:
    """A multipart body in a charset that is no text encoding: no parser reads
    its fields, and parsing it (``request.POST``) raises, a 500.

    DRF's parser would raise the same in the view: refuse it as the parse
    error it is (400, not saved). A plain view may read ``request.body``
    itself: count the raw bytes, boundary included, as for other bodies.
    """
    if isinstance(request, Request):
        raise ParseError(
            f"Multipart form parse error - charset {encoding!r} is not a text encoding."
        )
    return _body(django_request)


def _without_form_fields(body: bytes, encoding: str, exclude_fields) -> bytes:
    """A form body without its excluded fields (by name, as the view reads
    them), the other pairs as sent: a body without any is hashed as it was."""
    kept = [
        pair
        for pair in body.split(b"&")
        if _form_name(pair.partition(b"=")[0], encoding) not in exclude_fields
    ]
    return b"&".join(kept)


def _form_name(name: bytes, encoding: str) -> str:
    # As Django's QueryDict decodes it: "+" is a space, then %XX escapes.
    return unquote_to_bytes(name.replace(b"+", b" ")).decode(encoding, "replace")


def hold_body(request: Request) -> None:
    """Keep a DRF request's body for its fingerprint, whatever reads it first.

    DRF hands the stream itself to a parser other than its JSON, form and
    multipart ones: a permission or an authentication reading ``request.data``
    before the claim would leave the fingerprint no bytes. The body is held
    as ``request.body`` holds it (the parser then reads that copy), within
    DATA_UPLOAD_MAX_MEMORY_SIZE: a larger one is streamed, never held.
    """
    django_request = _django(request)
    if django_request._read_started or _over_the_limit(django_request):
        return
    parser = _parser_of(request)
    if parser is not None and not isinstance(parser, _PARSERS_READING_THE_BODY):
        django_request.body  # noqa: B018 (read and kept by Django)


def _body(django_request) -> bytes:
    try:
        return django_request.body
    except RawPostDataException as exc:
        raise IdempotencyConfigurationError(
            "The body of this keyed request was read before its key was "
            "claimed (a permission, authentication or throttle reading "
            "request.data through a parser that reads the stream itself), so "
            "it cannot be fingerprinted. IdempotencyMixin keeps such a body up "
            "to DATA_UPLOAD_MAX_MEMORY_SIZE; with @idempotent, or past that "
            "size, read request.data in the view, not before it."
        ) from exc


def _streamed_by_drf(request: Request, django_request) -> bool:
    """Django refuses to hold such a body (``request.body``), but DRF hands
    it to a parser that streams it (FileUploadParser) for an unkeyed request.
    Only DRF's JSON and form parsers read ``request.body`` themselves."""
    # A stream already read (by a parser, before the claim) cannot be spooled.
    if not _over_the_limit(django_request) or django_request._read_started:
        return False
    parser = _parser_of(request)
    return parser is not None and not isinstance(parser, JSONParser | FormParser)


def _over_the_limit(django_request) -> bool:
    """A body larger than Django holds (``request.body`` refuses it)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(django_request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False  # Django answers it
    return limit is not None and length > limit


def _parser_of(request: Request):
    """The parser DRF will hand the body to, as Request._parse() picks it."""
    if request.negotiator is None:
        return None
    return request.negotiator.select_parser(request, request.parsers or ())


def _frame_streamed_body(digest, request) -> None:
    """Frame a raw body as ``_frame`` does, without holding it in memory.

    It is read into a spooled file (on disk past FILE_UPLOAD_MAX_MEMORY_SIZE),
    which then stands in for the request's stream, as ``request.body`` puts
    the bytes it read back: the view's parser reads the same bytes, still
    unread, as it would from the client.
    """
    # Open past this function: it becomes the request's stream.
    spooled = tempfile.SpooledTemporaryFile(  # noqa: SIM115
        max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE
    )
    while chunk := request.read(_CHUNK_SIZE):
        spooled.write(chunk)
    digest.update(b"%d:" % spooled.tell())
    spooled.seek(0)
    while chunk := spooled.read(_CHUNK_SIZE):
        digest.update(chunk)
    spooled.seek(0)
    request._stream = spooled
    request._read_started = False


def _canonical_json(body: bytes, encoding: str, exclude_fields) -> tuple[bytes, ...]:
    try:
        text = body.decode(encoding)
        # The exact value of each number its float does not hold.
        exact_values = {}

        def parse_float(number):
            if (exact := _exact_number(number)) is not None:
                exact_values[number] = exact
            return float(number)

        document = json.loads(text, parse_float=parse_float)
        canonical = (_dumps(document, exclude_fields),)
        if not exact_values:
            return canonical
        # One float stands for many numbers (0.1 for 0.10000000000000001,
        # inf for all past 1.8e308), which a view reading decimals tells
        # apart: their exact values count too, in a frame of their own, so
        # the hash of a body without one stays as it was.
        exact = json.loads(
            text, parse_float=lambda number: exact_values.get(number, float(number))
        )
        return (*canonical, _dumps(exact, exclude_fields))
    except (ValueError, LookupError):
        # Not JSON, or a charset naming no text codec (base64, bz2: Django
        # takes any name codecs knows): the view's parser will refuse it.
        return (body,)
    except RecursionError as exc:
        # Deeper than the interpreter's recursion limit: no parser reads it.
        raise BodyTooDeep("The JSON body is nested too deeply.") from exc


def _dumps(document, exclude_fields) -> bytes:
    for path in exclude_fields:
        _drop(document, path.split("."))
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def _exact_number(number: str) -> str | None:
    """A JSON number's exact value when its float holds another; else None.

    Normalised (``1e400`` and ``10E399`` are one number), with the precision
    the number is written with, so nothing is rounded.
    """
    shortest = repr(float(number))
    if shortest == number:
        return None  # as most clients write floats: nothing to compare
    try:
        value = decimal.Decimal(number)
        if value == decimal.Decimal(shortest):
            return None
        context = decimal.Context(
            prec=len(number), Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN
        )
        return str(value.normalize(context))
    except ArithmeticError:
        return number  # an exponent past what a decimal holds: as written


def _drop(document, path) -> None:
    head, *rest = path
    if not isinstance(document, dict) or head not in document:
        return
    if rest:
        _drop(document[head], rest)
    else:
        del document[head]


def _canonical_multipart(request, exclude_fields=()) -> bytes:
    if isinstance(request, Request) or request.method == "POST":
        # Parse as the view will, once: DRF's request.POST/FILES (any method)
        # and Django's (POST only) stream files through the upload handlers,
        # to disk past FILE_UPLOAD_MAX_MEMORY_SIZE, and keep them for the view.
        # The body is never held whole, so keyed uploads have the same limits
        # as unkeyed ones. A parse error is the view's answer, before any claim.
        return _canonical_form(request.POST, request.FILES, exclude_fields)
    # Django parses no other method: a plain view reads request.body itself,
    # so read it (within DATA_UPLOAD_MAX_MEMORY_SIZE, as the view would) and
    # parse a copy, leaving the request's upload handlers to the view.
    body = _body(request)
    handlers = [import_string(path)(request) for path in settings.FILE_UPLOAD_HANDLERS]
    try:
        fields, files = MultiPartParser(
            request.META, io.BytesIO(body), handlers, request.encoding
        ).parse()
    except MultiPartParserError:
        return body  # the view's parser will refuse it
    return _canonical_form(fields, files, exclude_fields)


def _canonical_form(fields, files, exclude_fields=()) -> bytes:
    # Fields the view excludes by name (a client's timestamp) do not count.
    fields = sorted(item for item in _lists(fields) if item[0] not in exclude_fields)
    # By field name only: a field's files keep the order they were sent in,
    # since request.FILES[name] is the last of them.
    files = [
        (name, upload.name, _file_digest(upload))
        for name, uploads in sorted(_lists(files), key=itemgetter(0))
        for upload in uploads
    ]
    return json.dumps([fields, files], separators=(",", ":")).encode()


def _lists(mapping):
    # A parser other than DRF's MultiPartParser may take a multipart body
    # (FileUploadParser takes any media type) and answer plain dicts.
    if hasattr(mapping, "lists"):
        return mapping.lists()
    return [(name, [value]) for name, value in mapping.items()]


def _file_digest(upload) -> str:
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()
