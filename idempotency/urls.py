"""The documentation of the problem types, where their ``type`` URIs point::

    path("problems/", include("idempotency.urls")),

(the default ``IDEMPOTENCY["PROBLEM_BASE_URI"]`` is ``/problems/``).
"""

from django.urls import path

from .shared import views

app_name = "once_problems"

urlpatterns = [
    path("", views.problem_type_list, name="list"),
    path("<slug:name>", views.problem_type, name="detail"),
]
