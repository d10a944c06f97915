"""idempotency.openapi.AutoSchema documents the contract of every guarded view."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import path
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema, extend_schema_view
from drf_spectacular.validation import validate_schema
from rest_framework import serializers, status
from rest_framework.decorators import action, api_view
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from idempotency import keys
from idempotency.decorators import idempotent
from idempotency.exceptions import KeyMalformed
from idempotency.openapi import KEY_PATTERN, PROBLEM_COMPONENT, IdempotentSchemaMixin
from idempotency.openapi import AutoSchema as IdempotentAutoSchema
from tests.testapp.models import Widget
from tests.testapp.views import WidgetSerializer, WidgetViewSet

PROBLEM_REF = {"$ref": f"#/components/schemas/{PROBLEM_COMPONENT}"}


def generate(**kwargs):
    schema = SchemaGenerator(**kwargs).get_schema(request=None, public=True)
    validate_schema(schema)
    return schema


@pytest.fixture(scope="module")
def schema():
    return generate(urlconf="tests.testapp.urls")


def key_header(operation):
    found = [
        p
        for p in operation.get("parameters", [])
        if p["in"] == "header" and p["name"] == "Idempotency-Key"
    ]
    assert len(found) <= 1
    return found[0] if found else None


def assert_documents_contract(operation, *, required=True):
    header = key_header(operation)
    assert header is not None
    assert header["required"] is required
    assert header["schema"]["maxLength"] == 255
    assert header["schema"]["minLength"] == 1
    assert "visible ASCII" in header["description"]
    responses = operation["responses"]
    for code in ("400", "409", "422"):
        content = responses[code]["content"]
        assert content["application/problem+json"]["schema"] == PROBLEM_REF
    assert "Retry-After" in responses["409"]["headers"]
    assert "Retry-After" not in responses["422"].get("headers", {})
    successes = [code for code in responses if code.startswith("2")]
    assert successes
    for code in successes:
        replayed = responses[code]["headers"]["Idempotent-Replayed"]
        assert replayed["schema"] == {"type": "string", "enum": ["true"]}


def assert_undocumented(operation):
    assert key_header(operation) is None
    assert not set(operation["responses"]) & {"400", "409", "422"}
    for response in operation["responses"].values():
        assert "Idempotent-Replayed" not in response.get("headers", {})


@pytest.mark.parametrize(
    "url",
    [
        "/api/orders/",  # a viewset with the mixin, and an outbox event
        "/t/widgets/",  # ModelViewSet with the mixin
        "/t/charge/",  # APIView with the mixin, lease mode
        "/t/method/",  # @idempotent on an APIView method
        "/t/function/",  # @idempotent below @api_view
        "/t/confirming/{id}/confirm/",  # an action serving GET and POST
    ],
)
def test_guarded_post_documents_the_contract(schema, url):
    assert_documents_contract(schema["paths"][url]["post"])


def test_optional_key_is_documented_as_not_required(schema):
    assert_documents_contract(schema["paths"]["/t/optional/"]["post"], required=False)


@pytest.mark.parametrize(
    ("url", "method"),
    [
        ("/api/orders/", "get"),
        ("/api/orders/{id}/", "get"),
        ("/t/widgets/", "get"),
        ("/t/widgets/{id}/", "put"),
        ("/t/widgets/{id}/", "patch"),
        ("/t/widgets/{id}/", "delete"),
        ("/t/function-reads/", "get"),  # @idempotent lets safe methods through
        ("/t/confirming/{id}/confirm/", "get"),  # so does the mixin
    ],
)
def test_unguarded_actions_document_nothing(schema, url, method):
    assert_undocumented(schema["paths"][url][method])


def test_problem_component_is_rfc_9457(schema):
    problem = schema["components"]["schemas"][PROBLEM_COMPONENT]
    assert set(problem["properties"]) == {
        "type",
        "title",
        "status",
        "detail",
        "instance",
    }
    assert problem["required"] == ["type", "title", "status"]


def test_mixin_docstring_does_not_describe_views(schema):
    # OrderViewSet has no docstring of its own.
    assert "description" not in schema["paths"]["/api/orders/"]["post"]


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("order-42", True),
        ("a" * 255, True),
        ('"quoted key"', False),  # a space, even quoted, is not visible ASCII
        ('"quoted-\\"key\\""', True),
        ('"unclosed', False),
        ('"bad\\escape"', False),
        ('""', False),
        ("", False),
        ("tab\there", False),
        ("caf\u00e9", False),
        ("k1,k2", False),  # the header sent twice
        ('"k1,k2"', True),
    ],
)
def test_key_pattern_matches_what_the_server_accepts(value, valid):
    try:
        accepted = bool(keys.parse(value))
    except KeyMalformed:
        accepted = False
    assert accepted is valid
    assert bool(re.fullmatch(KEY_PATTERN, value)) is valid


def test_key_pattern_accepts_the_parameters_the_server_ignores():
    for value in ('"abc";p=1', '"abc"; p=?1;q'):
        assert re.fullmatch(KEY_PATTERN, value)
        assert keys.parse(value) == "abc"
    assert not re.fullmatch(KEY_PATTERN, '"abc";P=1')  # keys are lowercase


# Views with schema customisations of their own.


class TaggedSchema(IdempotentAutoSchema):
    def get_tags(self):
        return ["custom-tag"]


class CustomSchemaWidgetViewSet(WidgetViewSet):
    schema = TaggedSchema()
    idempotent_actions = ("create", "rename")
    idempotency_operation = "widget.create.custom"

    @extend_schema(request=None, responses={200: WidgetSerializer}, summary="Rename")
    @action(detail=True, methods=["post"])
    def rename(self, request, pk=None):
        return Response(WidgetSerializer(self.get_object()).data)


@extend_schema_view(create=extend_schema(summary="Create a widget"))
@extend_schema(tags=["annotated-view"])
class AnnotatedWidgetViewSet(WidgetViewSet):
    idempotency_operation = "widget.create.annotated"


class NameSerializer(serializers.Serializer):
    name = serializers.CharField()


class AnnotatedMethodView(APIView):
    @extend_schema(
        request=NameSerializer,
        responses={201: WidgetSerializer},
        summary="Annotated method",
    )
    @idempotent("widget.annotated")
    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        return Response(WidgetSerializer(widget).data, status=status.HTTP_201_CREATED)


@extend_schema(request=NameSerializer, responses={201: WidgetSerializer})
@api_view(["POST"])
@idempotent("widget.annotated.function", required=False)
def annotated_function(request):
    widget = Widget.objects.create(name=request.data["name"])
    return Response(WidgetSerializer(widget).data, status=status.HTTP_201_CREATED)


class ExtendedWidgetViewSet(WidgetViewSet):
    idempotency_operation = "widget.create.extended"


class ExtendedWidgetSchema(IdempotentSchemaMixin, AutoSchema):
    def get_summary(self):
        return "From the user's extension"


class ExtendedWidgetExtension(OpenApiViewExtension):
    # A project's own extension for one view wins over ours.
    target_class = ExtendedWidgetViewSet

    def view_replacement(self):
        return type(
            "ExtendedWidgetViewSet", (self.target,), {"schema": ExtendedWidgetSchema()}
        )


@pytest.fixture(scope="module")
def custom_schema():
    router = SimpleRouter()
    router.register("custom", CustomSchemaWidgetViewSet, basename="custom")
    router.register("annotated-set", AnnotatedWidgetViewSet, basename="annotated")
    router.register("extended", ExtendedWidgetViewSet, basename="extended")
    return generate(
        patterns=[
            *router.urls,
            path("annotated/", AnnotatedMethodView.as_view()),
            path("annotated-function/", annotated_function),
        ]
    )


def test_custom_schema_class_keeps_its_customisation(custom_schema):
    create = custom_schema["paths"]["/custom/"]["post"]
    assert create["tags"] == ["custom-tag"]
    assert_documents_contract(create)
    listing = custom_schema["paths"]["/custom/"]["get"]
    assert listing["tags"] == ["custom-tag"]
    assert_undocumented(listing)


def test_extend_schema_on_a_guarded_action_keeps_both(custom_schema):
    rename = custom_schema["paths"]["/custom/{id}/rename/"]["post"]
    assert rename["summary"] == "Rename"
    assert rename["tags"] == ["custom-tag"]  # the view's schema class still applies
    assert "200" in rename["responses"]
    assert_documents_contract(rename)


def test_extend_schema_on_a_viewset_keeps_both(custom_schema):
    create = custom_schema["paths"]["/annotated-set/"]["post"]
    assert create["summary"] == "Create a widget"
    assert create["tags"] == ["annotated-view"]
    assert_documents_contract(create)
    assert_undocumented(custom_schema["paths"]["/annotated-set/"]["get"])


def test_a_view_extension_of_the_project_can_mix_the_contract_in(custom_schema):
    create = custom_schema["paths"]["/extended/"]["post"]
    assert create["summary"] == "From the user's extension"
    assert_documents_contract(create)


def test_the_header_setting_names_the_header():
    with override_settings(IDEMPOTENCY={"HEADER": "X-Request-Key"}):
        schema = generate(urlconf="tests.testapp.urls")
    post = schema["paths"]["/t/widgets/"]["post"]
    assert key_header(post) is None
    names = [p["name"] for p in post["parameters"] if p["in"] == "header"]
    assert names == ["X-Request-Key"]
    assert "X-Request-Key" in post["responses"]["422"]["description"]


def test_extend_schema_on_a_decorated_method_keeps_both(custom_schema):
    post = custom_schema["paths"]["/annotated/"]["post"]
    assert post["summary"] == "Annotated method"
    assert "requestBody" in post
    assert_documents_contract(post)


def test_extend_schema_above_api_view_keeps_both(custom_schema):
    post = custom_schema["paths"]["/annotated-function/"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Name"
    }
    assert_documents_contract(post, required=False)


def test_the_schema_endpoint_serves_the_contract(api):
    response = api.get("/api/schema/", Accept="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    post = response.json()["paths"]["/api/orders/"]["post"]
    assert_documents_contract(post)


NO_SPECTACULAR = """
import sys

sys.modules["drf_spectacular"] = None  # as if it were not installed

import django
from django.conf import settings

from tests import settings as suite

settings.configure(
    INSTALLED_APPS=[app for app in suite.INSTALLED_APPS if app != "drf_spectacular"],
    MIDDLEWARE=suite.MIDDLEWARE,
    TEMPLATES=suite.TEMPLATES,
    REST_FRAMEWORK={},
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    ROOT_URLCONF="idempotency.console.urls",
)
django.setup()

from django.core.management import call_command

import idempotency.decorators
import idempotency.mixins

call_command("check", fail_level="ERROR")
assert "idempotency.openapi" not in sys.modules
print("ok")
"""


def test_the_app_works_without_drf_spectacular():
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NO_SPECTACULAR)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
