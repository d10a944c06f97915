"""The /metrics view."""

from django.db import transaction
from django.http import Http404, HttpResponse
from django.views.decorators.cache import never_cache

from ..shared.conf import shared_settings


# It only reads, each gauge on its own: in ATOMIC_REQUESTS's transaction, the
# first gauge query to fail would abort it, and every later gauge with it.
@transaction.non_atomic_requests
# Each scrape reads now: a per-site cache (or a proxy's) would answer the
# counters and gauges of an earlier one.
@never_cache
def metrics_view(request):
    """Every metric, in the text format the scraper asks for (Prometheus's
    or OpenMetrics); 404 while IDEMPOTENCY["METRICS"] is off."""
    # Read as every first use reads it: a switch set to anything but True or
    # False is refused (ImproperlyConfigured, naming it), never taken for off.
    if not shared_settings.METRICS:
        raise Http404("Metrics are off: IDEMPOTENCY['METRICS'] is False.")
    # Imported only once metrics are on: the URLconf that mounts this view
    # loads without prometheus-client, which metrics off do not need.
    from prometheus_client.exposition import choose_encoder

    from .collector import served_registry

    try:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    except (TypeError, ValueError):
        # It fails on a version it cannot read ("version=abc"): whoever
        # reaches the view would make a 500 per request, each logged as an
        # error. Answered in the text format every scraper reads.
        encoder, content_type = choose_encoder("")
    return HttpResponse(encoder(served_registry()), content_type=content_type)
