"""Turn a view's answer into final bytes inside the claim, so it can be stored."""

from rest_framework.exceptions import (
    ParseError,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.request import Request

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
        _refuse_deep_bodies(request)
        invalid = False
        try:
            response = handler(request, *args, **kwargs)
        except BodyTooDeep as exc:
            response = problems.from_exception(exc, instance=request.path)
            invalid = True
        except Exception as exc:
            response = view.handle_exception(exc)
            invalid = isinstance(exc, _INVALID)
        response = render(view.finalize_response(request, response, *args, **kwargs))
        if invalid:
            raise Invalid(response)
        return response

    return produce


def _refuse_deep_bodies(request):
    # DRF's JSONParser turns a ValueError into a 400 but lets RecursionError
    # (a body nested past the interpreter's limit) escape as a 500. These
    # parser instances belong to this request alone, so wrapping their
    # parse() changes nothing for any other request.
    for parser in request.parsers:
        parser.parse = _depth_guarded(parser.parse)


def _depth_guarded(parse):
    def guarded(*args, **kwargs):
        try:
            return parse(*args, **kwargs)
        except RecursionError as exc:
            raise BodyTooDeep("The body is nested too deeply.") from exc

    return guarded


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
