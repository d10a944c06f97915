"""The metrics endpoint; include it where the scraper looks::

path("metrics", include("idempotency.prometheus.urls")),
"""

from django.urls import path

from .views import metrics_view

app_name = "once_metrics"

urlpatterns = [path("", metrics_view, name="metrics")]
