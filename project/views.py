"""The demo's landing page: where to go and what to try."""

from django.views.generic import TemplateView


class HomeView(TemplateView):
    template_name = "home.html"

    def get_context_data(self, **kwargs):
        # Absolute URLs, so the curl commands can be pasted as they are.
        base = self.request.build_absolute_uri("/").rstrip("/")
        return {**super().get_context_data(**kwargs), "base": base}
