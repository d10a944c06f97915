"""RFC 9457 problem details responses, shared by every app.

``from_exception`` is the one way a view answers with a problem: the apps
raise an ``OnceError`` subclass and render it here.
"""

import json

from django.http import HttpResponse
from django.utils.encoding import escape_uri_path

from .conf import shared_settings
from .exceptions import OnceError

CONTENT_TYPE = "application/problem+json"
# The longest ``instance`` a problem carries; a longer path is left out, as a
# URL few clients or proxies would take anyway.
MAX_INSTANCE_LENGTH = 2048


def type_uri(slug: str) -> str:
    """Return the stable ``type`` URI for a problem slug."""
    if slug == "about:blank" or ":" in slug:
        return slug
    return shared_settings.PROBLEM_BASE_URI + slug


def instance_of(request) -> str | None:
    """The request's path as a problem's ``instance``: percent-encoded, as a
    URI reference is, so that no control character the client sent (a
    decoded %0A or %1B) reaches whoever reads the problem; None when too long."""
    path = escape_uri_path(request.path)
    return path if len(path) <= MAX_INSTANCE_LENGTH else None


def from_exception(exc: OnceError, *, instance=None) -> HttpResponse:
    """Render ``exc`` as problem+json, with ``Retry-After`` when it has one."""
    body = {"type": type_uri(exc.type), "title": exc.title, "status": exc.status}
    if exc.detail and exc.detail != exc.title:
        body["detail"] = exc.detail
    if instance:
        body["instance"] = instance
    response = HttpResponse(
        json.dumps(body).encode(), status=exc.status, content_type=CONTENT_TYPE
    )
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response
