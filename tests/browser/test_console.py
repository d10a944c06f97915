"""A real browser walks the console: login, dashboard, a figure, a confirmed replay."""

import os
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections

from webhooks.models import WebhookReceipt

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
# The flags a sandboxed machine with no network needs (no GPU, no updates).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]


@pytest.fixture
def browser(monkeypatch):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls
    # the test makes between steps are still plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            # While Playwright's loop runs, Django keeps this thread's
            # connections per context, where the test database's teardown
            # would not find (and close) them.
            connections.close_all()
            browser.close()


def test_operator_follows_a_figure_and_force_reprocesses_with_confirmation(
    live_server, browser, django_user_model, handler_runs
):
    django_user_model.objects.create_superuser("root", password="pw")
    call_command("seed_console")
    processed = WebhookReceipt.objects.get(delivery_id="seed-processed")
    page = browser.new_page(viewport={"width": 1280, "height": 900})

    page.goto(f"{live_server.url}/admin/login/?next=/admin/ops/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/ops/")
    assert page.locator("svg[role=img] polyline").count() >= 3
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)

    # A figure leads to its filtered list.
    page.click("text=github · processed >> xpath=.. >> a")
    page.wait_for_url("**/webhookreceipt/?**")
    assert "state__exact=processed" in page.url
    assert page.locator("#result_list tbody tr").count() == 2  # one is old

    # Force reprocess asks first; nothing runs until the operator confirms.
    page.check(f"input[name=_selected_action][value='{processed.pk}']")
    page.select_option("select[name=action]", "force_reprocess")
    page.click("button[name=index]")
    page.wait_for_selector("text=Yes, reprocess")
    page.screenshot(path=str(SCREENSHOTS / "confirm.png"))
    assert handler_runs == []
    page.click("input[value='Yes, reprocess']")
    page.wait_for_selector(".messagelist")
    assert "Queued 1 receipt for reprocessing." in page.inner_text(".messagelist")
    # The reopened receipt runs once; the drain it kicked also takes the
    # seeded receipt that was waiting (a drain empties the received queue).
    assert sorted(handler_runs) == ["seed-processed", "seed-received"]
    processed.refresh_from_db()
    assert processed.state == "processed"
