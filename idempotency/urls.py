"""Mount before the admin: ``path("admin/ops/", include("idempotency.urls"))``."""

from django.contrib import admin
from django.urls import path

from . import ops

app_name = "once_ops"

urlpatterns = [
    path("", admin.site.admin_view(ops.dashboard), name="dashboard"),
    path("purge/", admin.site.admin_view(ops.purge), name="purge"),
]
