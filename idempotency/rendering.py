"""Turn a view's answer into final bytes inside the claim, so it can be stored."""

import traceback

from rest_framework.exceptions import (
    ParseError,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from . import responses
from .exceptions import BodyTooDeep, Invalid
from .shared import problems

# The request itself failed, before the view changed anything: such answers
# are not saved, so the corrected retry with the same key runs.
_INVALID = (ValidationError, ParseError, UnsupportedMediaType, BodyTooDeep)


def drf_producer(view, handler, request, args, kwargs):
    """Run a DRF handler the way ``APIView.dispatch`` would, then render.

    The answer is stored before ``dispatch`` sees it, so exceptions become
    responses and content negotiation applies here (``finalize_response`` is
    safe to run again afterwards).
    """

    def produce():
        invalid = False
        try:
            response = _body_depth_checked(handler, request, args, kwargs)
        except BodyTooDeep as exc:
            response = problems.from_exception(
                exc, instance=problems.instance_of(request)
            )
            invalid = True
        except Exception as exc:
            response = view.handle_exception(exc)
            invalid = isinstance(exc, _INVALID)
        response = view.finalize_response(request, response, *args, **kwargs)
        # Before the page renders: it turns a 204 into a 200, and indents.
        responses.render_for_the_record(response)
        response = render(response)
        if invalid:
            raise Invalid(response)
        return response

    return produce


def _body_depth_checked(handler, request, args, kwargs):
    """Call the handler; a body its parser could not nest that deep is a 400.

    DRF's JSONParser turns a ValueError into a 400 but lets RecursionError (a
    body nested past the interpreter's limit) escape as a 500. Only one
    raised inside a parser's ``parse()`` is the body's fault: the view's own
    recursion stays a 500.
    """
    try:
        return handler(request, *args, **kwargs)
    except RecursionError as exc:
        if _raised_by_a_parser(exc):
            raise BodyTooDeep("The body is nested too deeply.") from exc
        raise


def _raised_by_a_parser(exc) -> bool:
    frames = traceback.walk_tb(exc.__traceback__)
    return any(
        frame.f_code.co_name == "parse"
        and isinstance(frame.f_locals.get("self"), BaseParser)
        for frame, _line in frames
    )


def django_producer(view_func, request, args, kwargs):
    def produce():
        return render(view_func(request, *args, **kwargs))

    return produce


def drf_view_of(request):
    """Return the APIView handling a DRF ``Request``, or None for plain Django."""
    if isinstance(request, Request):
        return request.parser_context.get("view")
    return None


def render(response):
    if hasattr(response, "render") and not response.is_rendered:
        response.render()
    return response
