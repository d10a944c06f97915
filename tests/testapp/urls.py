from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter, SimpleRouter

from . import orders, payments, steps_views, views

api = DefaultRouter()
api.register("orders", orders.OrderViewSet, basename="order")

router = SimpleRouter()
router.register("widgets", views.WidgetViewSet, basename="widget")
router.register("guarded", views.GuardedWidgetViewSet, basename="guarded")
router.register("throttled", views.ThrottledWidgetViewSet, basename="throttled")
router.register("stamped", views.StampedWidgetViewSet, basename="stamped")
router.register("anonymous", views.AnonymousWidgetViewSet, basename="anonymous")
router.register("closed", views.ClosedAnonymousWidgetViewSet, basename="closed")
router.register("optional", views.OptionalKeyWidgetViewSet, basename="optional")
router.register("principals", views.PrincipalWidgetViewSet, basename="principals")
router.register(
    "optional-pointing",
    views.PointingOptionalKeyWidgetViewSet,
    basename="optional-pointing",
)
router.register("confirming", views.ConfirmingWidgetViewSet, basename="confirming")
router.register("deleting", views.DeletingWidgetViewSet, basename="deleting")
router.register("async-create", views.AsyncCreateViewSet, basename="async-create")

urlpatterns = [
    path("admin/ops/", include("idempotency.console.urls")),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/", include(api.urls)),
    path("webhooks/", include("webhooks.urls")),
    path("problems/", include("idempotency.urls")),
    path("metrics", include("idempotency.prometheus.urls")),
    path("t/", include(router.urls)),
    path("t/charge/", views.ChargeView.as_view()),
    path("t/payment/", steps_views.PaymentView.as_view()),
    path("t/payments/", payments.PaymentView.as_view()),
    path("t/upload/", views.UploadView.as_view()),
    path("t/raw/<str:filename>/", views.RawUploadView.as_view()),
    path("t/checked-raw/<str:filename>/", views.CheckedRawUploadView.as_view()),
    path("t/note/", views.NoteView.as_view()),
    path("t/note-function/", views.note_function_view),
    path("t/cookie/", views.CookieSettingView.as_view()),
    path("t/versioned/", views.VersionedWidgetView.as_view()),
    path("t/step-up/", views.StepUpWidgetView.as_view()),
    path("t/method/", views.DecoratedMethodView.as_view()),
    path("t/function/", views.decorated_api_view),
    path("t/function-reads/", views.decorated_api_view_with_reads),
    path("t/html/", views.html_only_api_view),
    path("t/html-or-json/", views.html_or_json_api_view),
    path("t/plain/", views.plain_django_view),
    path("t/plain-class/", views.PlainClassView.as_view()),
    path("t/raw-body/", views.raw_body_view),
    path("t/async-class/", views.AsyncPlainClassView.as_view()),
    path("t/redirect/", views.redirecting_view),
    path("t/redirect-lease/", views.redirecting_lease_view),
    path("t/page/", views.csrf_page_view),
    path("t/page-ensured/", views.ensured_csrf_page_view),
    path("t/stream/", views.streaming_view),
    path("t/file/", views.file_view),
    path("t/vary-cookie/", views.vary_cookie_view),
    path("t/gzip/", views.gzip_view),
    path("t/german/", views.german_view),
    path("t/async/", views.async_view),
    path("t/async-handler/", views.AsyncHandlerView.as_view()),
]
