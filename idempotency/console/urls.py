"""The dashboard's URLs; mount them before the admin's own::

path("admin/ops/", include("idempotency.console.urls")),
"""

from django.contrib import admin
from django.urls import path

from . import views

app_name = "once_ops"

urlpatterns = [
    path("", admin.site.admin_view(views.dashboard), name="dashboard"),
    path("purge/", admin.site.admin_view(views.purge), name="purge"),
]
