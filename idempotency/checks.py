"""System checks for the IDEMPOTENCY settings: the validators of ``conf``,
every TTL against the lease, and whether the problem types' URIs lead
somewhere."""

from collections.abc import Iterator
from typing import Any

from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.urls import Resolver404, get_resolver, resolve

from .conf import idempotency_settings, key_ttl, outlasting_ttl
from .shared import views
from .shared.settings import InvalidSetting


def check_settings(app_configs=None, **kwargs):
    return idempotency_settings.check()


def check_ttls(app_configs=None, **kwargs):
    """The TTL setting and each view's ttl pass the TTL's floor and outlast
    LEASE + WAIT, as a keyed request checks its own at first use."""
    try:
        setting = idempotency_settings.TTL
    except ImproperlyConfigured:
        return []  # reported by check_settings
    errors = []
    for where, value in [("IDEMPOTENCY['TTL']", setting), *_view_ttls()]:
        try:
            outlasting_ttl(key_ttl(value), where)
        except InvalidSetting as exc:
            message = str(exc) if exc.check_id else f"{where} {exc}"
            check_id = exc.check_id or "idempotency.E003"
            errors.append(Error(message, hint=exc.hint, id=check_id))
    return errors


def _view_ttls() -> Iterator[tuple[str, Any]]:
    """The ttl of every guarded view the URLconf imports, as written."""
    from .decorators import decorated_policies
    from .mixins import mixin_classes

    try:
        get_resolver().url_patterns  # noqa: B018 (imports the views, as serving does)
    except Exception:  # Django's own URL check reports it
        return
    for policy in decorated_policies():
        if policy.ttl is not None:
            yield f"The ttl of {policy.operation!r}", policy.ttl
    # The schema generator subclasses views under their own name
    # (idempotency.openapi): report each name once.
    named = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in mixin_classes()}
    for name, cls in named.items():
        if cls.idempotency_ttl is not None:
            yield f"{name}.idempotency_ttl", cls.idempotency_ttl


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
