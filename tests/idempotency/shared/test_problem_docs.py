"""Every problem type's URI leads to its documentation, served by the app."""

import json

import pytest
from django.core.checks import run_checks
from django.test.utils import override_settings

from idempotency.checks import check_problem_docs
from idempotency.shared.problem_docs import paragraphs, problem_types

pytestmark = pytest.mark.django_db


def test_a_problem_answer_links_to_a_page_about_it(api, client):
    answer = api.post("/t/widgets/", {"name": "a"})  # no key: key-missing

    problem = json.loads(answer.content)
    assert problem["type"] == "/problems/key-missing"
    page = client.get(problem["type"])
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="key-missing"' in html
    assert "requires an <code>Idempotency-Key</code> header" in html


def test_the_index_lists_every_type(client):
    html = client.get("/problems/").content.decode()
    for name in problem_types().types:
        assert f'id="{name}"' in html


def test_an_unknown_type_is_404(client):
    assert client.get("/problems/no-such-thing").status_code == 404


def test_the_pages_are_served_in_a_project_requiring_login_everywhere(client, settings):
    # The type URIs are followed by API clients and their developers, who
    # have no session: LoginRequiredMiddleware must not send them to a login.
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.contrib.auth.middleware.LoginRequiredMiddleware",
    ]

    pages = [client.get(path) for path in ("/problems/", "/problems/key-missing")]

    assert [page.status_code for page in pages] == [200, 200]


def test_the_page_is_parsed_into_one_section_per_type():
    docs = problem_types()
    assert docs.title == "Problem types"
    assert docs.types["key-reused"].group == "Idempotency keys"
    assert docs.types["webhook-too-large"].group == "Webhooks"
    assert docs.types["key-reused"].text.startswith("422.")


def test_paragraphs_escape_html_and_mark_code():
    assert paragraphs("a <b> `c<d>`\n\nnext") == (
        "<p>a &lt;b&gt; <code>c&lt;d&gt;</code></p><p>next</p>"
    )


def test_w001_when_nothing_serves_the_problem_pages():
    assert check_problem_docs() == []
    with override_settings(ROOT_URLCONF="idempotency.console.urls"):
        [warning] = check_problem_docs()
    assert warning.id == "idempotency.W001"
    assert 'include("idempotency.urls")' in warning.hint


@override_settings(IDEMPOTENCY={"PROBLEM_BASE_URI": "https://docs.example.com/p/"})
def test_no_warning_when_the_types_point_elsewhere():
    assert check_problem_docs() == []


@pytest.mark.parametrize("base", ["problems/", "docs.example.com/p/"])
def test_a_base_that_is_neither_a_uri_nor_a_path_is_refused(base):
    with override_settings(IDEMPOTENCY={"PROBLEM_BASE_URI": base}):
        ids = [m.id for m in run_checks() if m.id.startswith("idempotency.")]
    assert ids == ["idempotency.E011"]


@pytest.mark.parametrize("base", ["/problems", "https://docs.example.com/problems"])
def test_a_base_ending_in_a_name_is_refused(base):
    # Each type is appended as is: "https://docs.example.com/problemskey-missing".
    with override_settings(IDEMPOTENCY={"PROBLEM_BASE_URI": base}):
        ids = [m.id for m in run_checks() if m.id.startswith("idempotency.")]
    assert ids == ["idempotency.E011"]


@pytest.mark.parametrize(
    "base", ["/problems/", "https://x/docs#", "https://x/doc?type=", "urn:problem:"]
)
def test_a_base_that_ends_where_a_type_may_follow_is_taken(base):
    with override_settings(IDEMPOTENCY={"PROBLEM_BASE_URI": base}):
        ids = [m.id for m in run_checks() if m.id == "idempotency.E011"]
    assert ids == []
