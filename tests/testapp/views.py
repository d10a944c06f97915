"""Views the tests drive: every integration style, plus fault switches."""

import hashlib
import io
import json

from django.db import transaction
from django.http import (
    FileResponse,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.template import engines
from django.utils.decorators import method_decorator
from django.utils.timezone import now
from django.views import View
from django.views.decorators.csrf import csrf_exempt, ensure_csrf_cookie
from django.views.decorators.gzip import gzip_page
from django.views.decorators.vary import vary_on_cookie
from rest_framework import (
    authentication,
    permissions,
    serializers,
    status,
    throttling,
    versioning,
    viewsets,
)
from rest_framework.decorators import (
    action,
    api_view,
    parser_classes,
    permission_classes,
    renderer_classes,
)
from rest_framework.exceptions import NotAuthenticated, NotFound
from rest_framework.parsers import BaseParser, FileUploadParser
from rest_framework.renderers import JSONRenderer, TemplateHTMLRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.decorators import idempotent
from idempotency.mixins import IdempotencyMixin

from .downstream import provider
from .models import Widget

# Tests arm these to make the next N calls misbehave; "402" is a business
# refusal (a client error that is not a validation failure).
faults = {
    "raise": 0,
    "500": 0,
    "409": 0,
    "402": 0,
    "crash": 0,
    "invalid": 0,
    "not-found": 0,
    "commit": 0,
    "on-commit": 0,
}


class SimulatedCrash(BaseException):
    """The process dies here: nothing below the view gets to run."""


def _maybe_fail():
    for name in faults:
        if faults[name]:
            faults[name] -= 1
            if name == "raise":
                raise RuntimeError("injected failure")
            if name == "crash":
                raise SimulatedCrash
            if name == "invalid":  # a validation failure after the work began
                raise serializers.ValidationError({"amount": "refused late"})
            if name == "not-found":  # DRF's handler answers it (404)
                raise NotFound("No such basket.")
            if name == "commit":  # the view succeeds; its transaction's commit fails
                _violate_a_deferred_constraint()
                return None
            if name == "on-commit":  # it commits; then a hook of its own raises
                transaction.on_commit(_enqueue_with_the_broker_down)
                return None
            return Response({"error": name}, status=int(name))
    return None


class BrokerDown(Exception):
    pass


def _enqueue_with_the_broker_down():
    # task.delay() in transaction.on_commit(), while the broker is down.
    raise BrokerDown("the broker is down")


def _violate_a_deferred_constraint():
    """A step row of a unit that does not exist: its foreign key is checked
    at COMMIT (DEFERRABLE INITIALLY DEFERRED), not here."""
    from idempotency.shared.steps.models import StepRecord

    StepRecord.objects.create(
        unit_id="no-such-unit", name="n", state="done", attempt=1, created_at=now()
    )


class WidgetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Widget
        fields = ["id", "name"]


class WidgetViewSet(IdempotencyMixin, viewsets.ModelViewSet):
    queryset = Widget.objects.all()
    serializer_class = WidgetSerializer
    idempotency_operation = "widget.create"

    def create(self, request, *args, **kwargs):
        response = super().create(request, *args, **kwargs)
        failure = _maybe_fail()
        return failure or response


class DeletingWidgetViewSet(WidgetViewSet):
    """Guards its deletes too: they answer 204 with no body."""

    idempotency_operation = "widget.delete"
    idempotent_actions = ("destroy",)


class CanAddWidget(permissions.BasePermission):
    def has_permission(self, request, view):
        return request.user.has_perm("testapp.add_widget")


class GuardedWidgetViewSet(WidgetViewSet):
    permission_classes = [permissions.IsAuthenticated, CanAddWidget]
    idempotency_operation = "widget.create.guarded"


class WidgetThrottle(throttling.UserRateThrottle):
    rate = "3/min"


class ThrottledWidgetViewSet(WidgetViewSet):
    throttle_classes = [WidgetThrottle]
    idempotency_operation = "widget.create.throttled"


class StampedWidgetViewSet(WidgetViewSet):
    idempotency_operation = "widget.create.stamped"
    idempotency_exclude_fields = ("client_ts", "meta.sent_at")


class AnonymousWidgetViewSet(WidgetViewSet):
    permission_classes = [permissions.AllowAny]
    idempotency_operation = "widget.create.anonymous"
    idempotency_allow_anonymous = True


class ClosedAnonymousWidgetViewSet(WidgetViewSet):
    permission_classes = [permissions.AllowAny]
    idempotency_operation = "widget.create.closed"


class OptionalKeyWidgetViewSet(WidgetViewSet):
    idempotency_operation = "widget.create.optional"
    idempotency_required = False


class PointingOptionalKeyWidgetViewSet(OptionalKeyWidgetViewSet):
    """The keys page's pattern, set_resource() in perform_create, with the
    key optional."""

    idempotency_operation = "widget.create.optional.pointing"

    def perform_create(self, serializer):
        self.request.idempotency.set_resource(serializer.save())


class WidgetPrincipalAuthentication(authentication.BaseAuthentication):
    """A project's own principal that is not a user (a merchant's API key,
    say): here a widget named in X-Widget-Principal, its pks a sequence of
    their own."""

    def authenticate(self, request):
        pk = request.headers.get("X-Widget-Principal")
        if pk is None:
            return None
        principal = Widget.objects.get(pk=pk)
        principal.is_authenticated = True
        return principal, None


class PrincipalWidgetViewSet(WidgetViewSet):
    authentication_classes = [
        WidgetPrincipalAuthentication,
        authentication.BasicAuthentication,
    ]
    idempotency_operation = "widget.create.principals"


class ConfirmingWidgetViewSet(WidgetViewSet):
    """An action serving GET (what would be confirmed) and POST (confirm)."""

    idempotency_operation = "widget.confirm"
    idempotent_actions = ("create", "confirm")

    @action(detail=True, methods=["get", "post"])
    def confirm(self, request, pk=None):
        widget = self.get_object()
        if request.method in permissions.SAFE_METHODS:
            return Response({"name": widget.name})
        confirmation = Widget.objects.create(name=f"confirmed {widget.name}")
        return Response({"id": confirmation.pk}, status=status.HTTP_201_CREATED)


class ChargeSerializer(serializers.Serializer):
    amount = serializers.IntegerField(min_value=1, default=500)


class ChargeView(IdempotencyMixin, APIView):
    """Lease mode: a downstream charge, then the local row, then completion."""

    idempotency_mode = "lease"
    idempotency_operation = "widget.charge"

    def post(self, request):
        serializer = ChargeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        amount = serializer.validated_data["amount"]
        charge_id = provider.charge(request.idempotency.derive("charge"), amount)
        widget = Widget.objects.create(name=charge_id)
        failure = _maybe_fail()
        if failure:
            return failure
        request.idempotency.set_resource(widget)
        return Response({"charge": charge_id, "widget": widget.pk}, status=201)


class StepUpWidgetView(IdempotencyMixin, APIView):
    """Asks for a one-time password itself, after DRF authenticated the user."""

    idempotency_operation = "widget.step-up"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        if "X-Otp" not in request.headers:
            raise NotAuthenticated("Send the one-time password too.")
        return Response({"id": widget.pk}, status=status.HTTP_201_CREATED)


class VersionedWidgetView(IdempotencyMixin, APIView):
    """A view whose API version comes in the Accept header, not the URL."""

    versioning_class = versioning.AcceptHeaderVersioning
    idempotency_operation = "widget.versioned"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        if request.version == "2":  # the same intent, another shape
            return Response({"widget": {"id": widget.pk}}, status=201)
        return Response({"id": widget.pk}, status=status.HTTP_201_CREATED)


class CookieSettingView(IdempotencyMixin, APIView):
    """A DRF view that sets a cookie, for clients with or without a session."""

    idempotency_operation = "widget.cookie"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        response = Response({"id": widget.pk}, status=status.HTTP_201_CREATED)
        response.set_cookie("last_widget", str(widget.pk))
        return response


class UploadView(IdempotencyMixin, APIView):
    """Keyed uploads, through DRF's parsers and Django's upload handlers."""

    idempotent_actions = ("post", "put")
    idempotency_operation = "widget.upload"

    def post(self, request):
        upload = request.FILES["file"]
        digest = hashlib.sha256()
        for chunk in upload.chunks():
            digest.update(chunk)
        widget = Widget.objects.create(name=request.data["name"])
        body = {"id": widget.pk, "size": upload.size, "sha256": digest.hexdigest()}
        return Response(body, status=status.HTTP_201_CREATED)

    put = post


class RawUploadView(IdempotencyMixin, APIView):
    """A keyed raw-body upload, which DRF's FileUploadParser streams."""

    parser_classes = [FileUploadParser]
    idempotent_actions = ("put",)
    idempotency_operation = "widget.raw-upload"

    def put(self, request, filename):
        upload = request.data["file"]
        digest = hashlib.sha256()
        for chunk in upload.chunks():
            digest.update(chunk)
        widget = Widget.objects.create(name=filename)
        body = {"id": widget.pk, "size": upload.size, "sha256": digest.hexdigest()}
        return Response(body, status=status.HTTP_201_CREATED)


class PlainTextParser(BaseParser):
    """A parser of one's own: DRF hands it the request's stream itself, as to
    every parser but its JSON and form ones."""

    media_type = "text/plain"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read().decode()


class BodyChecked(permissions.BasePermission):
    """A permission that reads the body (``request.data``) before the view."""

    def has_permission(self, request, view):
        return "forbidden" not in str(request.data)


class NoteView(IdempotencyMixin, APIView):
    parser_classes = [PlainTextParser]
    permission_classes = [permissions.IsAuthenticated, BodyChecked]
    idempotency_operation = "widget.note"

    def post(self, request):
        widget = Widget.objects.create(name=request.data)
        return Response({"id": widget.pk, "name": widget.name}, status=201)


class CheckedRawUploadView(RawUploadView):
    permission_classes = [permissions.IsAuthenticated, BodyChecked]
    idempotency_operation = "widget.raw-upload.checked"


@api_view(["POST"])
@parser_classes([PlainTextParser])
@permission_classes([permissions.IsAuthenticated, BodyChecked])
@idempotent("widget.note-function")
def note_function_view(request):
    widget = Widget.objects.create(name=request.data)
    return Response({"id": widget.pk, "name": widget.name}, status=201)


class DecoratedMethodView(APIView):
    @idempotent("widget.method")
    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        return Response({"id": widget.pk}, status=status.HTTP_201_CREATED)


@api_view(["POST"])
@permission_classes([permissions.IsAuthenticated])
@idempotent("widget.function", ttl=60)
def decorated_api_view(request):
    widget = Widget.objects.create(name=request.data["name"])
    return Response({"id": widget.pk}, status=status.HTTP_201_CREATED)


@api_view(["GET", "POST"])
@idempotent("widget.function.reads", ttl=90)
def decorated_api_view_with_reads(request):
    if request.method in permissions.SAFE_METHODS:  # @idempotent lets it through
        return Response({"count": Widget.objects.count()})
    widget = Widget.objects.create(name=request.data["name"])
    return Response({"id": widget.pk}, status=status.HTTP_201_CREATED)


@api_view(["POST"])
@renderer_classes([TemplateHTMLRenderer])
@idempotent("widget.html")
def html_only_api_view(request):
    """A DRF view answering only HTML, with model instances in its data."""
    widget = Widget.objects.create(name=request.data["name"])
    template = request.data.get("template", "widget")
    return Response(
        {"widget": widget},
        status=status.HTTP_201_CREATED,
        template_name=f"testapp/{template}.html",
    )


@api_view(["POST"])
@renderer_classes([TemplateHTMLRenderer, JSONRenderer])
@idempotent("widget.html-or-json")
def html_or_json_api_view(request):
    """DRF's "varying behaviour by media type": model instances for the page,
    serialized data for JSON."""
    widget = Widget.objects.create(name=request.data["name"])
    if request.accepted_renderer.format == "html":
        return Response(
            {"widget": widget}, status=201, template_name="testapp/widget.html"
        )
    return Response(WidgetSerializer(widget).data, status=status.HTTP_201_CREATED)


# Tests set this to an async callable the async view awaits after its write.
async_view_pause = None


@csrf_exempt
@idempotent("widget.async")
async def async_view(request):
    if request.method == "GET":  # safe: @idempotent lets it through
        return JsonResponse({"count": await Widget.objects.acount()})
    widget = await Widget.objects.acreate(name=json.loads(request.body)["name"])
    if async_view_pause is not None:
        await async_view_pause()
    if faults["raise"]:
        faults["raise"] -= 1
        raise RuntimeError("injected failure")
    return JsonResponse({"id": widget.pk}, status=201)


class AsyncHandlerView(IdempotencyMixin, APIView):
    """DRF runs handlers synchronously: the mixin refuses an async one."""

    async def post(self, request):
        raise AssertionError("never runs")


class AsyncCreateViewSet(IdempotencyMixin, viewsets.GenericViewSet):
    async def create(self, request):
        raise AssertionError("never runs")


@csrf_exempt
@idempotent
def plain_django_view(request):
    if request.method != "POST":
        return HttpResponse(status=405)
    widget = Widget.objects.create(name=json.loads(request.body)["name"])
    response = JsonResponse({"id": widget.pk}, status=201)
    response["Location"] = f"/widgets/{widget.pk}/"
    response.set_cookie("session_hint", "secret")
    return response


def _create_widget(request):
    return Widget.objects.create(name=json.loads(request.body)["name"])


@csrf_exempt
@idempotent("widget.raw-body")
def raw_body_view(request):
    """A plain view that reads the body's bytes itself, whatever they are."""
    digest = hashlib.sha256(request.body).hexdigest()
    return JsonResponse({"id": Widget.objects.create(name=digest[:20]).pk}, status=201)


@method_decorator(csrf_exempt, name="dispatch")
class PlainClassView(View):
    """A Django class-based view (not DRF) with a guarded method."""

    @idempotent("widget.plain-class", ttl=90)
    def post(self, request):
        return JsonResponse({"id": _create_widget(request).pk}, status=201)


@method_decorator(csrf_exempt, name="dispatch")
class AsyncPlainClassView(View):
    @idempotent("widget.async-class")
    async def post(self, request):
        widget = await Widget.objects.acreate(name=json.loads(request.body)["name"])
        return JsonResponse({"id": widget.pk}, status=201)


@csrf_exempt
@idempotent("widget.redirect")
def redirecting_view(request):
    """Post/Redirect/Get: a success answered with a 302."""
    return HttpResponseRedirect(f"/widgets/{_create_widget(request).pk}/")


@csrf_exempt
@idempotent("widget.redirect.lease", mode="lease")
def redirecting_lease_view(request):
    return HttpResponseRedirect(f"/widgets/{_create_widget(request).pk}/")


@csrf_exempt
@idempotent("widget.page")
def csrf_page_view(request):
    """A plain Django page with a form: it embeds the session's CSRF token."""
    widget = _create_widget(request)
    page = engines["django"].from_string(
        "<p>Widget {{ pk }}</p><form method=post>{% csrf_token %}</form>"
    )
    return HttpResponse(page.render({"pk": widget.pk}, request), status=201)


# ensure_csrf_cookie reads the token before the keyed view runs.
ensured_csrf_page_view = ensure_csrf_cookie(csrf_page_view)


@csrf_exempt
@idempotent("widget.stream")
def streaming_view(request):
    """A streamed answer: its body is produced only as it is sent."""
    widget = _create_widget(request)
    status = 503 if widget.name == "unavailable" else 201
    return StreamingHttpResponse(iter([b"id=", b"%d" % widget.pk]), status=status)


@csrf_exempt
@idempotent("widget.file")
def file_view(request):
    widget = _create_widget(request)
    return FileResponse(io.BytesIO(b"receipt %d" % widget.pk), filename="r.txt")


@csrf_exempt
@idempotent("widget.gzip")
@gzip_page
def gzip_view(request):
    # Long enough for gzip_page to compress it (200 bytes or more).
    widget = _create_widget(request)
    return JsonResponse({"id": widget.pk, "note": "x" * 300}, status=201)


@csrf_exempt
@idempotent("widget.german")
def german_view(request):
    """An answer in a language the view chose, whatever the request's."""
    response = JsonResponse({"id": _create_widget(request).pk}, status=201)
    response["Content-Language"] = "de"
    return response


@csrf_exempt
@idempotent("widget.vary-cookie")
@vary_on_cookie
def vary_cookie_view(request):
    return JsonResponse({"id": _create_widget(request).pk}, status=201)
