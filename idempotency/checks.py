"""System checks for the IDEMPOTENCY settings: the validators of ``conf``,
every TTL against the lease, and whether the problem types' URIs lead
somewhere."""

from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.core.checks import Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.urls import Resolver404, URLResolver, get_resolver, resolve

from .conf import idempotency_settings, key_ttl, outlasting_ttl
from .shared import databases, views
from .shared.settings import InvalidSetting


def check_settings(app_configs=None, **kwargs):
    return idempotency_settings.check()


def check_ttls(app_configs=None, **kwargs):
    """The TTL setting and each view's ttl pass the TTL's floor and outlast
    LEASE + WAIT, and a steps-mode view's stays within UNIT_RETENTION (the
    setting's is the retention check's), as a keyed request checks its own
    at first use."""
    from .claims import STEPS
    from .stepping import within_unit_retention

    try:
        setting = idempotency_settings.TTL
    except ImproperlyConfigured:
        return []  # reported by check_settings
    errors = []
    for where, value, mode in [("IDEMPOTENCY['TTL']", setting, ""), *_view_ttls()]:
        try:
            ttl = outlasting_ttl(key_ttl(value), where)
            if mode == STEPS:
                within_unit_retention(ttl, where)
        except ImproperlyConfigured:
            continue  # LEASE, WAIT or UNIT_RETENTION: the settings checks say
        except InvalidSetting as exc:
            message = str(exc) if exc.check_id else f"{where} {exc}"
            check_id = exc.check_id or "idempotency.E003"
            errors.append(Error(message, hint=exc.hint, id=check_id))
    return errors


def _view_ttls() -> Iterator[tuple[str, Any, str]]:
    """The ttl of every guarded view, as written, and the view's mode."""
    for policy in _served_policies():
        if policy.ttl is not None:
            yield f"The ttl of {policy.operation!r}", policy.ttl, policy.mode
    for name, cls in _mixin_classes().items():
        if cls.idempotency_ttl is not None:
            yield f"{name}.idempotency_ttl", cls.idempotency_ttl, cls.idempotency_mode


def _mixin_classes() -> dict[str, Any]:
    from .mixins import mixin_classes

    # drf-spectacular subclasses views under their own name: report each once.
    return {f"{cls.__module__}.{cls.__qualname__}": cls for cls in mixin_classes()}


def _served_views() -> Iterator[Any]:
    """The view callables of the URLconf (importing them, as serving does)."""
    try:
        patterns = list(get_resolver().url_patterns)
    except Exception:  # Django's own URL check reports it
        return
    while patterns:
        pattern = patterns.pop()
        if isinstance(pattern, URLResolver):
            patterns.extend(pattern.url_patterns)
        else:
            yield pattern.callback


def _served_policies() -> Iterator[Any]:
    """The policy of every ``@idempotent`` view or handler the URLconf serves."""
    from .decorators import view_policy

    seen = set()
    for view in _served_views():
        for handler in _view_handlers(view):
            policy = view_policy(handler)
            # One handler may serve several methods (an @api_view's): once.
            if policy is not None and id(policy) not in seen:
                seen.add(id(policy))
                yield policy


def _view_handlers(view) -> list:
    """What serves a URLconf view's requests: the function itself, or its
    class's handlers (DRF's views and Django's own class-based views alike),
    a viewset's actions included."""
    cls = getattr(view, "view_class", None)
    if cls is None:
        return [view]
    actions = getattr(view, "actions", None) or {}  # a viewset's: method -> action
    return _handlers(cls, actions.values())


def _handlers(cls, actions=()) -> list:
    names = dict.fromkeys([*cls.http_method_names, *actions])
    return [getattr(cls, name, None) for name in names]


# The four apps: each one installed keeps its rows where the router writes them.
ONCE_APPS = ("idempotency", "outbox", "inbox", "webhooks")


def _written_to() -> list[str]:
    """The databases the apps write to: where the router sends each one's
    models."""
    return sorted(
        {
            router.db_for_write(model)
            for label in ONCE_APPS
            if apps.is_installed(label)
            for model in apps.get_app_config(label).get_models()
        }
    )


def check_autocommit(app_configs=None, **kwargs):
    """Every database the apps write to keeps Django's autocommit on: with it
    off no ``atomic()`` block commits (``idempotency.shared.databases``)."""
    return [
        Error(why, id="idempotency.E017")
        for using in _written_to()
        if (why := databases.manual_commit(using))
    ]


def check_engines(app_configs=None, **kwargs):
    """Every database the apps write to is PostgreSQL or SQLite, what their
    statements are written for (``idempotency.shared.databases``)."""
    return [
        Error(why, id="idempotency.E018")
        for using in _written_to()
        if (why := databases.unsupported_engine(using))
    ]


def check_atomic_requests(app_configs=None, **kwargs):
    """A steps-mode view must not run inside ATOMIC_REQUESTS: every step would
    be refused (``StepInTransaction``), as its first request says too."""
    from . import stepping
    from .models import IdempotencyRecord

    using = router.db_for_write(IdempotencyRecord)
    if not connections.settings[using].get("ATOMIC_REQUESTS"):
        return []
    return [
        Error(
            f"{_view_name(view)} runs its steps inside ATOMIC_REQUESTS.",
            hint=stepping.atomic_requests_message(using),
            obj=view,
            id="idempotency.E015",
        )
        for view in dict.fromkeys(_served_views())
        if _runs_steps(view)
        and using not in getattr(view, "_non_atomic_requests", set())
    ]


def _runs_steps(view) -> bool:
    from .claims import STEPS
    from .decorators import view_policy
    from .mixins import IdempotencyMixin

    cls = getattr(view, "cls", None)
    if cls is not None and issubclass(cls, IdempotencyMixin):
        return cls.idempotency_mode == STEPS
    return any(
        (policy := view_policy(handler)) is not None and policy.mode == STEPS
        for handler in _view_handlers(view)
    )


def _view_name(view) -> str:
    named = getattr(view, "view_class", view)
    return f"{named.__module__}.{named.__qualname__}"


def check_schema_class(app_configs=None, **kwargs):
    """With drf-spectacular, guarded views document the keys only through a
    schema class that mixes ``IdempotentSchemaMixin`` in."""
    if not apps.is_installed("drf_spectacular"):
        return []
    from .decorators import view_policy
    from .mixins import IdempotencyMixin
    from .openapi import IdempotentSchemaMixin

    served = [getattr(view, "cls", None) for view in _served_views()]
    guarded = [
        cls
        for cls in served
        if cls is not None
        and (
            issubclass(cls, IdempotencyMixin)
            or any(view_policy(handler) for handler in _handlers(cls))
        )
    ]
    return [
        Warning(
            f"{cls.__name__}'s schema does not document its keys.",
            hint='Set REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] to '
            '"idempotency.openapi.AutoSchema", or mix '
            "idempotency.openapi.IdempotentSchemaMixin into its schema class.",
            obj=cls,
            id="idempotency.W002",
        )
        for cls in dict.fromkeys(guarded)
        if not isinstance(cls.schema, IdempotentSchemaMixin)
    ]


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
