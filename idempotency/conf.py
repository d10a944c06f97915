"""Per-app settings objects: one dict per app, defaults, lazy dotted paths."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string


class AppSettings:
    """Read one settings dict (``settings.<namespace>``) with defaults.

    Unknown keys raise, dotted paths listed in ``import_strings`` are imported
    on first use, and every value is re-read after ``reload()`` (connected to
    ``setting_changed`` so ``override_settings`` works).
    """

    def __init__(self, namespace, defaults, import_strings=()):
        self.namespace = namespace
        self.defaults = defaults
        self.import_strings = frozenset(import_strings)
        self._cache = {}

    @property
    def user_settings(self) -> dict:
        value = getattr(settings, self.namespace, None) or {}
        unknown = sorted(set(value) - set(self.defaults))
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown {self.namespace} setting(s): {', '.join(unknown)}."
            )
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.defaults:
            raise AttributeError(f"Invalid {self.namespace} setting: {name!r}")
        try:
            return self._cache[name]
        except KeyError:
            pass
        value = self.user_settings.get(name, self.defaults[name])
        if name in self.import_strings and isinstance(value, str):
            value = import_string(value)
        self._cache[name] = value
        return value

    def reload(self) -> None:
        self._cache.clear()

    def on_setting_changed(self, *, setting, **kwargs) -> None:
        if setting == self.namespace:
            self.reload()


def as_timedelta(value) -> timedelta:
    """Accept a ``timedelta`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected seconds or a timedelta, got {value!r}")
    return timedelta(seconds=value)


idempotency_settings = AppSettings(
    "IDEMPOTENCY",
    defaults={
        # Request header carrying the key (IETF draft name).
        "HEADER": "Idempotency-Key",
        # How long a key is remembered; views override it with ``ttl``.
        "TTL": timedelta(hours=24),
        # How long a duplicate waits for the first request before 409.
        "WAIT": timedelta(seconds=1),
        # Lease mode: how long a claim is held before a retry may take it.
        "LEASE": timedelta(seconds=30),
        # ``(request) -> str | None``; None means anonymous.
        "SCOPE_RESOLVER": "idempotency.scopes.default_scope",
        # ``(status_code) -> bool``: which responses are stored and replayed.
        "STORE_STATUS": "idempotency.responses.is_storable",
        # Response headers replayed besides Content-Type and Location.
        "REPLAY_HEADERS": (),
        # Live records allowed per operation in the shared "anonymous" scope.
        "ANONYMOUS_MAX_KEYS": 10_000,
        # Base of the problem+json ``type`` URIs.
        "PROBLEM_BASE_URI": "https://django-once.readthedocs.io/problems/",
    },
    import_strings=("SCOPE_RESOLVER", "STORE_STATUS"),
)
