"""The page behind every problem ``type`` URI: what it means, what to do."""

from django.contrib.auth.decorators import login_not_required
from django.http import Http404
from django.template.response import TemplateResponse

from .problem_docs import problem_types


# Public, as the type URIs in every answer are: API clients have no session.
@login_not_required
def problem_type_list(request):
    return TemplateResponse(
        request, "idempotency/problem_types.html", {"docs": problem_types()}
    )


@login_not_required
def problem_type(request, name):
    docs = problem_types()
    if name not in docs.types:
        raise Http404("No such problem type.")
    return TemplateResponse(
        request,
        "idempotency/problem_types.html",
        {"docs": docs, "chosen": docs.types[name]},
    )
