"""The demo's URLs plus the bare baseline of the webhook intake."""

from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from webhooks.views import WebhookView


@csrf_exempt
def bare_webhook(request, source):
    """An intake that reads the body and answers 202: no verify, insert, enqueue."""
    request.read()
    return HttpResponse(status=202)


class IntakeWithoutEnqueue(WebhookView):
    """Verify and insert only: splits the intake's cost from the broker's."""

    def enqueue(self, pk, using):
        pass


urlpatterns = [
    path("bare-webhook/<str:source>/", bare_webhook),
    path("intake-no-enqueue/<str:source>/", IntakeWithoutEnqueue.as_view()),
    path("", include("project.urls")),
]
