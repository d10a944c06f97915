"""The dashboard's URLs; mount them before the admin's own::

path("admin/ops/", include("idempotency.console.urls")),
"""

from django.contrib import admin
from django.urls import path

from . import require_admin

require_admin(__name__)

from . import views  # noqa: E402 - it imports the admin's LogEntry

app_name = "once_ops"

urlpatterns = [
    path("", admin.site.admin_view(views.dashboard), name="dashboard"),
    path("purge/", admin.site.admin_view(views.purge), name="purge"),
]
