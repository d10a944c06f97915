"""RFC 9457 problem details responses, shared by every app."""

import json

from django.http import HttpResponse

from .conf import shared_settings

CONTENT_TYPE = "application/problem+json"


def type_uri(slug: str) -> str:
    """Return the stable ``type`` URI for a problem slug."""
    if slug == "about:blank" or ":" in slug:
        return slug
    return shared_settings.PROBLEM_BASE_URI + slug


def problem_response(
    status: int,
    title: str,
    *,
    slug="about:blank",
    detail=None,
    instance=None,
    retry_after=None,
    **extra,
) -> HttpResponse:
    body = {"type": type_uri(slug), "title": title, "status": status}
    if detail and detail != title:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    body.update(extra)
    response = HttpResponse(
        json.dumps(body).encode(), status=status, content_type=CONTENT_TYPE
    )
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def from_exception(exc, *, instance=None) -> HttpResponse:
    """Render an ``IdempotencyError`` (or any error with the same attributes)."""
    return problem_response(
        exc.status,
        exc.title,
        slug=exc.type,
        detail=exc.detail,
        instance=instance,
        retry_after=exc.retry_after,
    )
