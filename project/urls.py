from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/ops/", include("idempotency.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("project.shop.urls")),
    path("webhooks/", include("webhooks.urls")),
]
