"""drf-spectacular support: idempotent operations document their HTTP contract."""

import copy
import functools
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent, get_doc

from . import keys, responses
from .claims import Policy
from .conf import idempotency_settings
from .decorators import function_view_policy
from .mixins import IdempotencyMixin, action_name
from .shared import problems

PROBLEM_COMPONENT = "ProblemDetails"

# 1-255 visible ASCII as a bare token without a comma (a header sent twice
# arrives comma-joined), or the RFC 8941 string form "..." whose content,
# unescaped, is visible ASCII. maxLength bounds the raw header value.
KEY_PATTERN = (
    r"^(?:[\x21\x23-\x2B\x2D-\x7E][\x21-\x2B\x2D-\x7E]*"
    r'|"(?:[\x21\x23-\x5B\x5D-\x7E]|\\["\\])+")$'
)

PROBLEM_SCHEMA = {
    "type": "object",
    "description": "An RFC 9457 problem details object.",
    "properties": {
        "type": {
            "type": "string",
            "format": "uri-reference",
            "description": "Identifies the problem type; stable per case.",
        },
        "title": {"type": "string", "description": "Short summary of the type."},
        "status": {"type": "integer", "minimum": 100, "maximum": 599},
        "detail": {"type": "string", "description": "This occurrence, explained."},
        "instance": {"type": "string", "description": "The request's path."},
    },
    "required": ["type", "title", "status"],
    "additionalProperties": True,
}


def _policy_for(view, method: str) -> Policy | None:
    action = action_name(view, method)
    # The same decision IdempotencyMixin.initial() takes at request time.
    if isinstance(view, IdempotencyMixin) and action in view.get_idempotent_actions():
        return view.get_idempotency_policy()
    handler = getattr(view, action, None)
    # An APIView method carries its policy; an @api_view function's class is
    # found by its name.
    return _decorated_policy(handler) or function_view_policy(type(view))


def _decorated_policy(handler) -> Policy | None:
    while handler is not None:
        policy = getattr(handler, "idempotency_policy", None)
        if isinstance(policy, Policy):
            return policy
        handler = getattr(handler, "__wrapped__", None)
    return None


if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    _SchemaBase = AutoSchema
else:
    _SchemaBase = object


class IdempotentSchemaMixin(_SchemaBase):
    """Add the idempotency contract to operations a policy guards.

    Mixed in front of whatever AutoSchema the view uses, so its own
    customisation still applies; only the finished operation is amended.
    """

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(
            path, path_regex, path_prefix, method, registry
        )
        if operation is None:
            return None
        policy = _policy_for(self.view, method)
        if policy is not None:
            _document(operation, policy, registry)
        return operation

    def get_description(self):  # type: ignore[override]
        # drf-spectacular's AutoSchema.get_description() takes no arguments;
        # the stubs only know DRF's own ViewInspector.get_description().
        description = super().get_description()
        # drf-spectacular falls back on base classes' docstrings: a view without
        # one would be described by the mixin's, which says nothing about it.
        if description and description == get_doc(IdempotencyMixin):
            return ""
        return description


def _document(operation: dict, policy: Policy, registry) -> None:
    header = idempotency_settings.HEADER
    parameters = operation.setdefault("parameters", [])
    if not any(
        p.get("in") == "header" and p.get("name", "").lower() == header.lower()
        for p in parameters
    ):
        parameters.append(_key_parameter(header, policy.required))

    component = ResolvedComponent(
        name=PROBLEM_COMPONENT,
        type=ResolvedComponent.SCHEMA,
        object=PROBLEM_COMPONENT,
        schema=PROBLEM_SCHEMA,
    )
    registry.register_on_missing(component)

    answers = operation.setdefault("responses", {})
    for code, response in answers.items():
        if str(code).startswith("2"):
            response.setdefault("headers", {})[responses.REPLAYED_HEADER] = {
                "description": (
                    "Present (true) when this is the stored answer to an "
                    "earlier request with the same key."
                ),
                "schema": {"type": "string", "enum": ["true"]},
            }
    for code, description, headers in _problems(header):
        answer = answers.setdefault(code, {"description": description})
        answer.setdefault("content", {})[problems.CONTENT_TYPE] = {
            "schema": component.ref
        }
        if headers:
            answer.setdefault("headers", {}).update(headers)
    operation["responses"] = dict(sorted(answers.items(), key=lambda i: str(i[0])))


def _key_parameter(header: str, required: bool) -> dict:
    return {
        "in": "header",
        "name": header,
        "required": required,
        "description": (
            f"A unique key for this intent: 1-{keys.MAX_LENGTH} visible "
            'ASCII characters; the structured-field string form ("key", '
            "RFC 8941) is accepted. Retries of the same request reuse it and "
            "get the stored answer; another request under the same key is "
            "refused."
        ),
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": keys.MAX_LENGTH,
            "pattern": KEY_PATTERN,
        },
    }


def _problems(header: str) -> list[tuple[str, str, dict]]:
    uri = problems.type_uri
    retry_after = {
        "Retry-After": {
            "description": "Seconds to wait before retrying with the same key.",
            "schema": {"type": "integer", "minimum": 1},
        }
    }
    return [
        (
            "400",
            f"{header} missing or malformed ({uri('key-missing')}, "
            f"{uri('key-malformed')}), or a body nested too deeply to read "
            f"({uri('body-too-deep')}).",
            {},
        ),
        (
            "409",
            f"A request with this {header} is still in flight "
            f"({uri('request-in-flight')}, {uri('lease-lost')}).",
            retry_after,
        ),
        (
            "422",
            f"This {header} was already used with a different request "
            f"({uri('key-reused')}).",
            {},
        ),
    ]


@functools.cache
def _idempotent_schema_class(schema_class: type) -> type:
    return type(
        f"Idempotent{schema_class.__name__}",
        (IdempotentSchemaMixin, schema_class),
        {"__module__": schema_class.__module__},
    )


def _compose(schema):
    """Return a copy of ``schema`` (an AutoSchema) that also documents the keys."""
    if isinstance(schema, type):
        return _idempotent_schema_class(schema)
    composed = copy.copy(schema)
    composed.__class__ = _idempotent_schema_class(type(schema))  # type: ignore[arg-type]
    # The descriptor's per-view cache must not be shared with the original.
    composed.instance_schemas = WeakKeyDictionary()
    return composed


def _schema_only(handler, schema_class):
    """Stand in for an action whose ``@extend_schema`` would replace ours."""

    @functools.wraps(handler)
    def action(*args, **kwargs):
        return handler(*args, **kwargs)

    action.kwargs = {**handler.kwargs, "schema": schema_class}  # type: ignore[attr-defined]
    return action


class IdempotencyViewExtension(OpenApiViewExtension):
    """Give every DRF view a schema that documents its idempotent operations.

    A view-specific ``OpenApiViewExtension`` takes precedence over this one
    (lower priority); its schema class can mix in ``IdempotentSchemaMixin``.
    """

    target_class = "rest_framework.views.APIView"
    match_subclasses = True
    priority = -1

    def view_replacement(self):
        view_class = self.target
        schema = view_class.schema
        if not isinstance(schema, AutoSchema):
            return view_class
        attrs = {
            "__doc__": view_class.__doc__,
            "__module__": view_class.__module__,
            "__qualname__": view_class.__qualname__,
            "schema": _compose(schema),
        }
        # drf-spectacular lets a schema set on the action (@extend_schema on
        # the method, @action(schema=...)) win over the view's: compose it too.
        actions = getattr(self.target_callback, "actions", None) or {}
        for name in {*actions.values(), *view_class.http_method_names}:
            handler = getattr(view_class, name, None)
            action_schema = getattr(handler, "kwargs", {}).get("schema")
            if action_schema is not None and (
                isinstance(action_schema, AutoSchema)
                or (
                    isinstance(action_schema, type)
                    and issubclass(action_schema, AutoSchema)
                )
            ):
                attrs[name] = _schema_only(handler, _compose(action_schema))
        return type(view_class.__name__, (view_class,), attrs)
