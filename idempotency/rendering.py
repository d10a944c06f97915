"""Turn a view's answer into final bytes inside the claim, so it can be stored."""

from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.request import Request

from . import claims

# The request itself failed, before the view changed anything: such answers
# are not saved, so the corrected retry with the same key runs.
_INVALID = (ValidationError, ParseError)


def drf_producer(view, handler, request, args, kwargs):
    """Run a DRF handler the way ``APIView.dispatch`` would, then render.

    The answer is stored before ``dispatch`` sees it, so exceptions become
    responses and content negotiation applies here (``finalize_response`` is
    safe to run again afterwards).
    """

    def produce():
        invalid = False
        try:
            response = handler(request, *args, **kwargs)
        except Exception as exc:
            response = view.handle_exception(exc)
            invalid = isinstance(exc, _INVALID)
        response = render(view.finalize_response(request, response, *args, **kwargs))
        if invalid:
            raise claims.Invalid(response)
        return response

    return produce


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
