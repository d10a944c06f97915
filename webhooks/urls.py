from django.urls import path

from .views import WebhookView

app_name = "webhooks"

urlpatterns = [
    path("<str:source>/", WebhookView.as_view(), name="intake"),
]
