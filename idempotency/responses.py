"""Which responses are stored, what of them is kept, and how they replay."""

import gzip
import hashlib
import logging
import re
from dataclasses import dataclass, field
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse
from django.middleware.locale import LocaleMiddleware
from django.utils import translation
from django.utils.cache import has_vary_header, patch_vary_headers
from django.utils.module_loading import import_string
from rest_framework.response import Response

from . import signals
from .conf import idempotency_settings
from .exceptions import AnswerNotKept, AnswerNotShared
from .shared import storable

REPLAYED_HEADER = "Idempotent-Replayed"
# Content-Encoding says how to read the stored bytes (a view's own gzip_page
# compressed them): without it a replay is unreadable.
ALWAYS_REPLAYED = ("Content-Type", "Content-Encoding", "Location")

# As GZipMiddleware reads Accept-Encoding.
_ACCEPTS_GZIP = re.compile(r"\bgzip\b")

# 401 too: it asks for credentials, and the retry that sends them must run.
_NOT_STORABLE = frozenset({401, 408, 409, 425, 429})
# Where render_for_the_record() leaves the API's rendering of an HTML answer.
_API_RENDERING = "idempotency_api_rendering"
logger = logging.getLogger("idempotency")

# CsrfViewMiddleware sends the cookie while this flag is truthy; get_token()
# (a page embedding the token) and rotate_token() set it to True.
_CSRF_FLAG = "CSRF_COOKIE_NEEDS_UPDATE"
# Truthy, so the cookie is still sent whatever the view does or raises, but not
# True, so a flag set before the view cannot hide the view's own use of it.
_CSRF_FLAG_SET_BEFORE = "set before the view"


def is_storable(status_code: int) -> bool:
    """Store every final answer below 500 but the ones that invite a retry."""
    return status_code < 500 and status_code not in _NOT_STORABLE


def replay_header_names() -> tuple[str, ...]:
    # Set-Cookie is in neither: the setting refuses it (idempotency.E009).
    return ALWAYS_REPLAYED + idempotency_settings.REPLAY_HEADERS


@dataclass(frozen=True)
class Answer:
    """What a completed record keeps of the view's answer."""

    status_code: int
    # None: the answer was not kept, and a retry is told so (AnswerNotKept).
    body: bytes | None = None
    headers: dict = field(default_factory=dict)
    # The session the answer replays to (session_digest); "": any.
    session: str = ""


class SessionWatch:
    """What the view did to the client's session, seen from around it.

    The CSRF and session middleware add ``Set-Cookie`` and ``Vary: Cookie``
    after the view returns, so the answer is judged by what the view did:
    used the CSRF token (the page embeds it) or changed the session.
    """

    def __init__(self, request):
        self.request = request
        # ensure_csrf_cookie, a middleware's get_token() or a malformed cookie
        # set the flag before the view: mark it, to see the view set it again.
        if request.META.get(_CSRF_FLAG):
            request.META[_CSRF_FLAG] = _CSRF_FLAG_SET_BEFORE
        self._session_changed_before = self._session_changed()

    def _session_changed(self) -> bool:
        return bool(getattr(getattr(self.request, "session", None), "modified", 0))

    def token_used(self) -> bool:
        return self.request.META.get(_CSRF_FLAG) is True

    def session_changed(self) -> bool:
        return self._session_changed() and not self._session_changed_before


def session_digest(request) -> str:
    """Name the client's session by a digest of its cookie ("": it has none)."""
    cookie = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    return hashlib.sha256(cookie.encode()).hexdigest() if cookie else ""


def keep(response, watch: SessionWatch) -> Answer | None:
    """Decide what the record keeps of ``response``; None: roll its work back.

    Only an error the policy declines is undone (a retry then runs again):
    the client was told it failed. Any other answer keeps the view's work,
    since the client may have read it as done, and the record completes; when
    the answer cannot be kept whole, a retry is told so instead of running the
    work again (rule 12: no success whose effects are gone).
    """
    stored = getattr(response, _API_RENDERING, response)
    status = stored.status_code
    if not idempotency_settings.STORE_STATUS(status):
        if status >= 400:
            return None
        return _not_kept(watch, status, "STORE_STATUS declines it")
    if response.streaming:
        # Its body is produced only as it is sent, after the claim has ended.
        return _not_kept(watch, status, "it is streamed")
    if stored is response and watch.token_used():
        # The page embeds this session's CSRF token: never store it.
        return _not_kept(watch, status, "it carries the session's CSRF token")
    body = bytes(stored.content)
    if len(body) > idempotency_settings.MAX_STORED_BODY:
        return _not_kept(
            watch,
            status,
            f"its body of {len(body)} bytes is larger than MAX_STORED_BODY "
            f"({idempotency_settings.MAX_STORED_BODY})",
        )
    session = ""
    if _tied_to_session(response, watch):
        # Set-Cookie or Vary: Cookie: replay it only to the session it went to.
        session = session_digest(watch.request)
        if not session:
            return _not_kept(
                watch, status, "it sets cookies for a client without a session"
            )
    headers = {name: stored[name] for name in replay_header_names() if name in stored}
    language = _language_of(stored)
    if language:
        headers["Content-Language"] = language
    for name, value in headers.items():
        # Django refuses only CR and LF in a header: a NUL (from the client's
        # text in a Location, say) would fail the completion's UPDATE (jsonb
        # refuses it) after the view's work, and escaped it would not replay
        # as sent.
        try:
            storable.check_text(value, f"its {name} header")
        except ValueError as exc:
            return _not_kept(watch, status, str(exc))
    return Answer(status, body, headers, session)


def _language_of(response) -> str | None:
    """The language the client is told the answer is in, if any.

    LocaleMiddleware labels a replay with the retry's language otherwise,
    whatever language the stored bytes are in.
    """
    if "Content-Language" in response:  # the view's own
        return response["Content-Language"]
    if _labels_languages(tuple(settings.MIDDLEWARE)):
        # What the middleware will label it with: the language active now.
        return translation.get_language()
    return None


@lru_cache(maxsize=8)
def _labels_languages(middleware: tuple[str, ...]) -> bool:
    """Whether a LocaleMiddleware, Django's or a project's subclass, is in
    ``middleware``: it labels each answer with the request's language after
    the view has run.

    Cached per MIDDLEWARE, so each entry is imported once, not per request.
    """
    return any(
        isinstance(entry, type) and issubclass(entry, LocaleMiddleware)
        for entry in map(import_string, middleware)
    )


def _not_kept(watch: SessionWatch, status: int, reason: str) -> Answer:
    # Its record completes without it; a retry is refused (answer-not-kept).
    logger.warning(
        "Not keeping the answer (status %s): %s",
        status,
        reason,
        extra=signals.identity(watch.request.idempotency),
    )
    return Answer(status)


def _tied_to_session(response, watch) -> bool:
    return bool(
        response.cookies
        or "Set-Cookie" in response
        or has_vary_header(response, "Cookie")
        or watch.session_changed()
    )


def render_for_the_record(response) -> None:
    """Never store a page tied to one session: render HTML as the API instead.

    The browsable API's page (any ``text/html`` rendering) embeds the
    session's CSRF token, and a replay may go to another session of the user,
    or to a colleague sharing the scope. Store the same data rendered by the
    view's first non-HTML renderer (JSON by default), which ``keep()`` finds
    on the response. Called before the page renders: the browsable API's
    renderer answers a 204 as a 200, and sets its indentation in the
    response's context.
    """
    renderer = getattr(response, "accepted_renderer", None)
    if renderer is None or not _is_html(renderer):
        return
    stored = _api_rendering(response)
    if stored is not None:
        setattr(response, _API_RENDERING, stored)


def _api_rendering(response):
    """The HTML answer's data rendered as the API; None: it has none."""
    view = response.renderer_context["view"]
    api_renderer = next(
        (each for each in view.get_renderers() if not _is_html(each)), None
    )
    if api_renderer is None:
        # The view answers only HTML (TemplateHTMLRenderer): its data may be
        # model instances, which have no API rendering. The page is the
        # answer, judged as a plain Django page is (never kept with the
        # session's CSRF token in it).
        return None
    rendered = Response(
        response.data,
        status=response.status_code,
        headers={
            name: value
            for name, value in response.items()
            if name.lower() != "content-type"
        },
    )
    rendered.accepted_renderer = api_renderer
    rendered.accepted_media_type = api_renderer.media_type
    # Rendering writes the response into its context: give it its own copy.
    rendered.renderer_context = dict(response.renderer_context)  # type: ignore[attr-defined]
    try:
        return rendered.render()
    except Exception:
        # Data only the page renders (DRF's "varying behaviour by media
        # type" hands it model instances): the client asked for the page,
        # which then is the answer, as when the view has no other renderer.
        return None


def _is_html(renderer) -> bool:
    return renderer.media_type.startswith("text/html")


def replay(record, session: str) -> HttpResponse:
    """The stored answer, for a request from ``session`` (its digest).

    A record completed without its answer, or bound to another session,
    refuses instead: the work is done, so it must not run again.
    """
    if record.response_body is None:
        raise AnswerNotKept(
            f"The first request with this key completed with status "
            f"{record.status_code}, but its answer was not kept (too large, "
            "streamed, tied to one session, or not stored by policy). Its work "
            "is done: do not send it again under a new key; look its result up "
            "instead."
        )
    if record.session_digest and record.session_digest != session:
        raise AnswerNotShared(
            f"The first request with this key completed with status "
            f"{record.status_code}; its answer set cookies or varies by cookie, "
            "so it is replayed only to the session that sent it."
        )
    stored = record.response_headers
    response = HttpResponse(
        record.response_body or b"",
        status=record.status_code,
        headers={**stored, REPLAYED_HEADER: "true"},
    )
    if "Content-Type" not in stored:
        del response["Content-Type"]  # HttpResponse's default, never stored
    return response


def encode_for(response: HttpResponse, request) -> None:
    """Hand a replay's gzip bytes only to a client that accepts gzip.

    The stored bytes are the first client's: a view's own ``gzip_page``
    compressed them because that client accepted gzip. A retry that does not
    gets them decompressed, as the view would have answered it.
    """
    if response.get("Content-Encoding") != "gzip":
        return
    patch_vary_headers(response, ("Accept-Encoding",))
    if not _ACCEPTS_GZIP.search(request.headers.get("Accept-Encoding", "")):
        response.content = gzip.decompress(response.content)
        del response["Content-Encoding"]
        if "Content-Length" in response:  # replayed: the gzip bytes' length
            response["Content-Length"] = len(response.content)
