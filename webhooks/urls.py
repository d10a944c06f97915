from django.urls import path

from .views import WebhookView

app_name = "webhooks"

urlpatterns = [
    path("<str:source>/", WebhookView.as_view(), name="intake"),
    # Without the slash too: APPEND_SLASH would answer a POST there with a
    # redirect that drops the body, and providers do not follow it.
    path("<str:source>", WebhookView.as_view()),
]
