from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from .views import HomeView

urlpatterns = [
    path("", HomeView.as_view(), name="home"),
    path("admin/ops/", include("idempotency.console.urls")),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/", include("project.shop.urls")),
    path("webhooks/", include("webhooks.urls")),
    path("problems/", include("idempotency.urls")),
]
