"""Which responses are stored, what of them is kept, and how they replay."""

from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .conf import NEVER_REPLAYED, idempotency_settings

REPLAYED_HEADER = "Idempotent-Replayed"
ALWAYS_REPLAYED = ("Content-Type", "Location")

_NOT_STORABLE = frozenset({408, 409, 425, 429})


def is_storable(status_code: int) -> bool:
    """Store every final answer below 500 but the ones that invite a retry."""
    return status_code < 500 and status_code not in _NOT_STORABLE


def replay_header_names() -> tuple[str, ...]:
    extra = tuple(idempotency_settings.REPLAY_HEADERS)
    names = ALWAYS_REPLAYED + extra
    return tuple(name for name in names if name.lower() not in NEVER_REPLAYED)


def capture(response) -> tuple[int, bytes, dict]:
    """Return the status, body bytes and allow-listed headers to store."""
    response = _api_rendering(response)
    headers = {
        name: response[name] for name in replay_header_names() if name in response
    }
    return response.status_code, bytes(response.content), headers


def _api_rendering(response):
    """Never store a page tied to one session: render HTML as the API instead.

    The browsable API's page (any ``text/html`` rendering) embeds the
    session's CSRF token, and a replay may go to another session of the user,
    or to a colleague sharing the scope. Store the same data rendered by the
    view's first non-HTML renderer (JSON by default).
    """
    renderer = getattr(response, "accepted_renderer", None)
    if renderer is None or not _is_html(renderer):
        return response
    view = response.renderer_context["view"]
    api_renderer = next(
        (each for each in view.get_renderers() if not _is_html(each)), JSONRenderer()
    )
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
    return rendered.render()


def _is_html(renderer) -> bool:
    return renderer.media_type.startswith("text/html")


def replay(record) -> HttpResponse:
    stored = record.response_headers
    response = HttpResponse(
        record.response_body or b"",
        status=record.status_code,
        headers={**stored, REPLAYED_HEADER: "true"},
    )
    if "Content-Type" not in stored:
        del response["Content-Type"]  # HttpResponse's default, never stored
    return response
