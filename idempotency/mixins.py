"""DRF integration: ``IdempotencyMixin`` for viewsets, generic views, APIViews."""

from collections.abc import Collection
from typing import TYPE_CHECKING

from asgiref.sync import iscoroutinefunction
from rest_framework.request import Request
from rest_framework.views import APIView

from . import claims, fingerprint, rendering
from .conf import idempotency_settings
from .exceptions import IdempotencyConfigurationError
from .shared.settings import as_timedelta


def action_name(view, method: str) -> str:
    """What ``idempotent_actions`` names: a viewset's action, else the method."""
    return getattr(view, "action", None) or method.lower()


if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    from rest_framework.views import APIView as _ViewBase
else:
    _ViewBase = object


class IdempotencyMixin(_ViewBase):
    """Guard mutating actions of a DRF view with idempotency keys.

    Put it before the view class: ``class OrderViewSet(IdempotencyMixin,
    ModelViewSet)``. The key is claimed after authentication, permission and
    throttle checks, so a replay never bypasses them.
    """

    # Viewset actions, or lower-case method names for APIViews, to guard.
    idempotent_actions = ("create", "post")
    # Refuse guarded requests without a key (400) instead of running them bare.
    idempotency_required = True
    # "atomic" for local mutations; "lease" when the view calls other services.
    idempotency_mode = claims.ATOMIC
    # How long a key is remembered (seconds or timedelta, at least 60 s and
    # LEASE + WAIT); None: IDEMPOTENCY TTL.
    idempotency_ttl = None
    # Stable operation name; None: derived from the class and the action.
    idempotency_operation = None
    # Let anonymous clients send keys; they all share the scope "anonymous".
    # New keys there are claimed one at a time per operation (the cap is
    # counted under a lock held until the claim's transaction ends).
    idempotency_allow_anonymous = False
    # Body fields ignored by the fingerprint (client timestamps, nonces).
    idempotency_exclude_fields = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _check_base_order(cls)
        _check_options(cls, {})

    @classmethod
    def as_view(cls, *args, **initkwargs):
        # Options given to as_view() replace the class's on every instance.
        _check_options(cls, initkwargs)
        _check_actions(cls, initkwargs)
        return super().as_view(*args, **initkwargs)

    def get_idempotent_actions(self) -> Collection[str]:
        return self.idempotent_actions

    def get_idempotency_operation(self) -> str:
        if self.idempotency_operation:
            return self.idempotency_operation
        cls = type(self)
        action = action_name(self, self.request.method or "")
        return f"{cls.__module__}.{cls.__qualname__}.{action}"

    def get_idempotency_scope(self, request: Request) -> str | None:
        return idempotency_settings.SCOPE_RESOLVER(request)

    def get_idempotency_required(self) -> bool:
        return self.idempotency_required

    def get_idempotency_mode(self) -> str:
        return self.idempotency_mode

    def get_idempotency_ttl(self):
        return self.idempotency_ttl

    def get_idempotency_allow_anonymous(self) -> bool:
        return self.idempotency_allow_anonymous

    def get_idempotency_exclude_fields(self):
        return self.idempotency_exclude_fields

    def get_idempotency_policy(self) -> claims.Policy:
        cls = type(self)
        if any(
            getattr(cls, hook) is not getattr(IdempotencyMixin, hook)
            for hook in _OPTION_HOOKS
        ):
            # A hook decides per request: check what it returns, as the
            # class's own attributes were checked when it was built.
            options = claims.view_options(
                lambda name: f"{cls.__qualname__}.get_idempotency_{name}()",
                mode=self.get_idempotency_mode(),
                ttl=self.get_idempotency_ttl(),
                exclude_fields=self.get_idempotency_exclude_fields(),
                required=self.get_idempotency_required(),
                allow_anonymous=self.get_idempotency_allow_anonymous(),
            )
        else:
            # Checked when the class was built (_check_options).
            ttl = self.idempotency_ttl
            options = {
                "required": self.idempotency_required,
                "mode": self.idempotency_mode,
                "ttl": None if ttl is None else as_timedelta(ttl),
                "allow_anonymous": self.idempotency_allow_anonymous,
                "exclude_fields": tuple(self.idempotency_exclude_fields),
            }
        return claims.Policy(
            operation=self.get_idempotency_operation(),
            scope=self.get_idempotency_scope,
            **options,
        )

    def initial(self, request, *args, **kwargs):
        method = request.method.lower()
        action = action_name(self, method)
        handler = getattr(self, method, None)
        guarded = (
            handler is not None
            and request.method not in claims.UNGUARDED_METHODS
            and action in self.get_idempotent_actions()
        )
        if guarded and iscoroutinefunction(handler):
            # Refused before DRF's own checks, which fail in an async view.
            raise IdempotencyConfigurationError(
                f"{type(self).__qualname__}.{action} is async def, but DRF runs "
                "handlers synchronously; make it a plain def, or guard an async "
                "function view with @idempotent."
            )
        if guarded:
            # Before the permissions, which may read request.data first.
            fingerprint.hold_body(request)
        super().initial(request, *args, **kwargs)
        if not guarded:
            return
        policy = self.get_idempotency_policy()

        def idempotent_handler(request, *args, **kwargs):
            produce = rendering.drf_producer(self, handler, request, args, kwargs)
            return claims.execute(request, policy, produce)

        # dispatch() looks the handler up after initial(); as_view() for
        # viewsets binds actions the same way, as instance attributes.
        setattr(self, method, idempotent_handler)


# The options' get_*() hooks; overriding one makes its value a per-request one.
_OPTION_HOOKS = tuple(
    f"get_idempotency_{name}"
    for name in ("required", "mode", "ttl", "allow_anonymous", "exclude_fields")
)


def _check_options(cls, overrides) -> None:
    """Refuse a view class whose own options would switch a guarantee off."""

    def option(name):
        return overrides.get(f"idempotency_{name}", getattr(cls, f"idempotency_{name}"))

    claims.view_options(
        lambda name: f"{cls.__qualname__}.idempotency_{name}",
        mode=option("mode"),
        ttl=option("ttl"),
        exclude_fields=option("exclude_fields"),
        required=option("required"),
        allow_anonymous=option("allow_anonymous"),
    )


def _check_base_order(cls) -> None:
    """Refuse the mixin after the DRF view: ``APIView.initial()`` does not
    call ``super()``, so the mixin's would never run, and nothing is guarded."""
    bases = cls.__mro__
    if APIView in bases and bases.index(APIView) < bases.index(IdempotencyMixin):
        raise IdempotencyConfigurationError(
            f"{cls.__qualname__} lists IdempotencyMixin after its DRF view class, "
            "where it never runs: put it first, as in "
            f"class {cls.__name__}(IdempotencyMixin, ModelViewSet)."
        )


def _check_actions(cls, overrides) -> None:
    """Refuse ``idempotent_actions`` that can guard nothing: a bare string
    (matched a character at a time), or names none of which is an action or
    a handler of the view (a typo, or "post" on a viewset, whose action is
    "create"). An empty tuple is a subclass's way to guard nothing."""
    if cls.get_idempotent_actions is not IdempotencyMixin.get_idempotent_actions:
        return  # decided per request
    actions = overrides.get("idempotent_actions", cls.idempotent_actions)
    where = f"{cls.__qualname__}.idempotent_actions"
    if isinstance(actions, str) or not all(isinstance(a, str) for a in actions):
        raise IdempotencyConfigurationError(
            f"{where} must be a tuple of action or method names, not {actions!r}."
        )
    if actions and not any(callable(getattr(cls, action, None)) for action in actions):
        raise IdempotencyConfigurationError(
            f"{where} = {tuple(actions)!r} names no action or handler of the "
            "view, so no request would be guarded: name a viewset's actions "
            '("create", "update") or an APIView\'s methods ("post", "put").'
        )


def mixin_classes() -> list[type[IdempotencyMixin]]:
    """Every class imported so far that mixes ``IdempotencyMixin`` in."""
    found, pending = [], [IdempotencyMixin]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.append(subclass)
                pending.append(subclass)
    return found
