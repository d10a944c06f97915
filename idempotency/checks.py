"""System checks for the IDEMPOTENCY settings: the validators of ``conf``,
and whether the problem types' URIs lead somewhere."""

from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured
from django.urls import Resolver404, resolve

from .conf import idempotency_settings
from .shared import views


def check_settings(app_configs=None, **kwargs):
    return idempotency_settings.check()


def check_problem_docs(app_configs=None, **kwargs):
    """A problem ``type`` that is a path on this host must be served here."""
    try:
        base = idempotency_settings.PROBLEM_BASE_URI
    except ImproperlyConfigured:
        return []  # reported by check_settings
    if not base.startswith("/"):
        return []  # documented elsewhere, on purpose
    try:
        served = resolve(f"{base}key-missing").func is views.problem_type
    except Resolver404:
        served = False
    if served:
        return []
    return [
        Warning(
            f"Problem types link to {base}<name>, which nothing here serves.",
            hint=f'Add path("{base.strip("/")}/", include("idempotency.urls")) '
            "to the URLconf, or point IDEMPOTENCY['PROBLEM_BASE_URI'] at "
            "your own documentation.",
            id="idempotency.W001",
        )
    ]
