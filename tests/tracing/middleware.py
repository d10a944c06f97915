"""A server span per request, continuing an incoming ``traceparent``: what
opentelemetry-instrumentation-django does, without the package."""

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import (
    TraceContextTextMapPropagator,
)

tracer = trace.get_tracer("tests.server")


class ServerSpanMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        parent = TraceContextTextMapPropagator().extract(request.headers)
        with tracer.start_as_current_span(
            f"{request.method} {request.path}", context=parent, kind=SpanKind.SERVER
        ) as span:
            response = self.get_response(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response
