"""The /metrics view."""

from django.http import Http404, HttpResponse
from prometheus_client.exposition import choose_encoder

from ..shared import metrics
from .collector import served_registry


def metrics_view(request):
    """Every metric, in the text format the scraper asks for (Prometheus's
    or OpenMetrics); 404 while IDEMPOTENCY["METRICS"] is off."""
    if not metrics.is_on():
        raise Http404("Metrics are off: IDEMPOTENCY['METRICS'] is False.")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(served_registry()), content_type=content_type)
