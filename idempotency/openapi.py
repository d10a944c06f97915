"""drf-spectacular support: idempotent operations document their HTTP contract.

Set ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "idempotency.openapi.AutoSchema"``,
or mix ``IdempotentSchemaMixin`` into a schema class of your own.
"""

from typing import TYPE_CHECKING

from drf_spectacular import openapi as spectacular
from drf_spectacular.plumbing import ResolvedComponent, get_doc

from . import keys, responses
from .claims import UNGUARDED_METHODS, Policy
from .conf import idempotency_settings
from .decorators import view_policy
from .mixins import IdempotencyMixin, action_name
from .shared import problems

PROBLEM_COMPONENT = "ProblemDetails"

# 1-255 visible ASCII as a bare token without a comma (a header sent twice
# arrives comma-joined), or the RFC 8941 string form "..." whose content,
# unescaped, is visible ASCII, with the sf-item parameters the server
# ignores. maxLength bounds the raw header value.
KEY_PATTERN = (
    r"^(?:[\x21\x23-\x2B\x2D-\x7E][\x21-\x2B\x2D-\x7E]*"
    r'|"(?:[\x21\x23-\x5B\x5D-\x7E]|\\["\\])+"' + keys.PARAMETERS + ")$"
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
        "instance": {
            "type": "string",
            "format": "uri-reference",
            "description": "The request's path, percent-encoded.",
        },
    },
    "required": ["type", "title", "status"],
    "additionalProperties": True,
}


def _policy_for(view, method: str) -> Policy | None:
    if method.upper() in UNGUARDED_METHODS:
        return None  # neither the mixin nor @idempotent guards safe methods
    action = action_name(view, method)
    # The same decision IdempotencyMixin.initial() takes at request time.
    if isinstance(view, IdempotencyMixin) and action in view.get_idempotent_actions():
        return view.get_idempotency_policy()
    # An APIView method, or the handler of an @api_view function.
    return view_policy(getattr(view, action, None))


if TYPE_CHECKING:  # what the mixin is mixed into, for the type checker
    _SchemaBase = spectacular.AutoSchema
else:
    _SchemaBase = object


class IdempotentSchemaMixin(_SchemaBase):
    """Add the idempotency contract to operations a policy guards.

    Mix it in front of a drf-spectacular ``AutoSchema`` subclass of your own
    (``class Schema(IdempotentSchemaMixin, MyAutoSchema)``): its own
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


class AutoSchema(IdempotentSchemaMixin, spectacular.AutoSchema):
    """drf-spectacular's AutoSchema, documenting the idempotency contract.

    Set it as ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]``.
    """
