"""The proof kit in an adopter's project: the README's tests for its endpoint,
consumer and webhook handler pass against the README's code, and fail, naming
each broken guarantee, once broken versions of that code are swapped in.

The project's own pytest runs them (pytest-django, on a test database of its
own), from the wheel installed with the README's testing extra.
"""

import secrets

import pytest

from .project import (
    ALL_APPS_BLOCKS,
    APP,
    PROJECT,
    TESTING_INSTALL_BLOCK,
    Database,
    Project,
    documented_extras,
    run,
)

pytestmark = [pytest.mark.adopter, pytest.mark.postgresql]

# The all-apps project of the README, and its proof-kit blocks.
BLOCKS = [*ALL_APPS_BLOCKS, "pytest-ini", "tests"]

# The mistakes the kit is for, one per file the README wrote.
BROKEN = {
    f"{APP}/views.py": """\
# No IdempotencyMixin: the key is ignored and every request runs.
from django.db import transaction
from rest_framework import permissions, serializers, viewsets

from outbox.api import record

from .models import Order


class OrderSerializer(serializers.ModelSerializer):
    class Meta:
        model = Order
        fields = ["id", "sku", "quantity"]


class OrderViewSet(viewsets.ModelViewSet):
    queryset = Order.objects.all()
    serializer_class = OrderSerializer
    permission_classes = [permissions.IsAuthenticated]

    def perform_create(self, serializer):
        with transaction.atomic():
            order = serializer.save()
            record("order", order.pk, "order.created", {"order": order.pk})
""",
    f"{APP}/tasks.py": """\
# No @consumer: a redelivered message ships again.
from celery import shared_task

from .models import Shipment


@shared_task(name="orders.ship", acks_late=True)
def ship(*, event_type, aggregate_type, aggregate_id, payload, headers):
    Shipment.objects.create(order_id=payload["order"])
""",
    f"{APP}/webhooks.py": """\
# The build is recorded after the commit: a worker dying in between loses it.
from django.db import transaction

from webhooks.handlers import on

from .models import Build


@on("github", "push")
def build(event):
    commit = event.data["after"]
    transaction.on_commit(lambda: Build.objects.create(commit=commit))
""",
}


@pytest.fixture(scope="module")
def project(venv, distributions, adopter_workdir):
    _sdist, wheel = distributions
    # The README's testing install, into the session's virtualenv.
    run(
        [
            venv.python,
            "-m",
            "pip",
            "install",
            "--quiet",
            f"{wheel}[{documented_extras(TESTING_INSTALL_BLOCK)}]",
        ],
        env=venv.environ(),
        timeout=600,
    )
    project = Project(
        adopter_workdir / "proof-kit",
        venv,
        GITHUB_WEBHOOK_SECRET=secrets.token_hex(32),
        # As the README says: record()'s kick of the relay goes nowhere.
        CELERY_BROKER_URL="memory://",
        PYTEST_ADDOPTS="",
    )
    database = Database()
    project.append(f"{PROJECT}/settings.py", database.settings())
    project.use(*BLOCKS)
    project.manage("makemigrations", APP)
    try:
        yield project
    finally:
        database.drop_test_database()


def pytest_in(project):
    """Run the project's own tests; --reuse-db keeps its test database between
    the two runs (the models are the same)."""
    command = [project.venv.python, "-m", "pytest", "-p", "no:cacheprovider"]
    result = project.run([*command, "-rs", "--reuse-db"], check=False, timeout=300)
    return result.returncode, result.stdout + result.stderr


def test_the_readme_proofs_pass_against_the_readme_code(project):
    returncode, output = pytest_in(project)

    assert returncode == 0, output[-6000:]
    # Skipped: the derived-key and scoped-downstream cases (no downstream),
    # both order cases (GitHub deliveries carry no event time) and the six
    # steps cases, a crash and a give-up each (neither the view, the consumer
    # nor the handler runs steps). Passed: the failed-delivery, failed-handler
    # and forced-reprocess cases beside the 16 the kit had before them.
    assert "19 passed, 10 skipped" in output, output[-3000:]
    assert "set downstream (what the view calls for the outside world" in output
    assert "github deliveries carry no event time" in output
    assert "the view ran no step: it is not a steps-mode view" in output
    assert "not a steps consumer" in output
    assert "not a steps handler" in output


def test_the_readme_proofs_name_each_guarantee_broken_code_breaks(project):
    originals = {path: project.file(path).read_text() for path in BROKEN}
    try:
        for path, code in BROKEN.items():
            project.write(path, code)
        returncode, output = pytest_in(project)
    finally:
        for path, code in originals.items():
            project.write(path, code)

    assert returncode == 1, output[-6000:]
    for broken in [
        # The view without IdempotencyMixin.
        "a retry after a lost response replays the stored answer and runs nothing",
        "identical requests racing on one key make one effect",
        "the same key with another payload is refused with 422",
        "every payload field the view does not exclude on purpose is in the "
        "fingerprint",
        "a failure after the view's own writes is never stored as a success",
        "a stored answer is never returned to another scope",
        # The consumer without @consumer.
        "a redelivered message is applied once",
        "a consumer that dies after its commit and before the ack applies the "
        "message once",
        "an event the relay publishes twice reaches its consumer once",
        # The handler that records the build on commit.
        "a webhook whose worker died while processing it is applied exactly once",
    ]:
        assert f"Guarantee broken: {broken}" in output, (broken, output[-6000:])
    assert "the view ran again: effects went 0 → 2 (expected 0 → 1)" in output
    assert "then the task was redelivered: the effect was lost" in output
