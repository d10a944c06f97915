"""Set up and serve the demo: migrate, seed, then Celery and the web server."""

import os
import signal
import socket
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Migrate, seed demo data and serve the demo project with Celery."

    def handle(self, *args, **options):
        # runserver leaves with os._exit() when its port is taken, which would
        # skip the cleanup below and leave the worker and beat running.
        address = os.environ.get("DEMO_ADDRESS", "127.0.0.1:8000")
        refuse_a_busy_address(address)
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        call_command("seed_console")
        var = settings.BASE_DIR / "var"
        # The filesystem broker needs its folder; beat keeps its schedule here.
        (var / "broker").mkdir(parents=True, exist_ok=True)
        # 0.0.0.0 listens everywhere, but is no address to browse to.
        host, _, port = address.rpartition(":")
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
        self.stdout.write(
            f"\nThe demo runs at {url}/\n"
            f"  admin console: {url}/admin/  (login admin / admin)\n"
            f"  API:           {url}/api/orders/  (HTTP Basic alice / alice)\n"
            f"  start here:    {url}/  (links and commands to try)\n"
            f"  try: curl -u alice:alice -H 'Idempotency-Key: demo-1' "
            f'-H \'Content-Type: application/json\' -d \'{{"sku": "BOOK-1", '
            f'"quantity": 1}}\' {url}/api/orders/\n'
            f"  Celery worker + beat run beside it ({settings.CELERY_BROKER_URL}):\n"
            f"  each order's event reserves stock once (see Stock in the admin).\n"
        )
        celery = [sys.executable, "-m", "celery", "-A", "project"]
        children = [
            subprocess.Popen([*celery, "worker", "-P", "solo", "-l", "info"]),
            subprocess.Popen(
                [*celery, "beat", "-l", "info", "-s", str(var / "celerybeat-schedule")]
            ),
        ]
        # A SIGTERM unwinds like Ctrl-C, through the cleanup below.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            call_command("runserver", address, use_reloader=False)
        finally:
            # Ctrl-C lands here too: never leave a worker or beat behind.
            for child in children:
                child.terminate()
            for child in children:
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()


def refuse_a_busy_address(address):
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CommandError(
            f"DEMO_ADDRESS={address!r} is no HOST:PORT with a port of 0 to "
            "65535, e.g. DEMO_ADDRESS=127.0.0.1:8001 make demo"
        )
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host or "127.0.0.1", int(port)))
        except OSError as exc:
            raise CommandError(
                f"Cannot serve the demo on {address}: {exc.strerror}. "
                "Stop what uses it, or choose another address, e.g. "
                "DEMO_ADDRESS=127.0.0.1:8001 make demo"
            ) from None
