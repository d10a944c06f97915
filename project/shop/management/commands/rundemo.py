"""Set up and serve the demo: migrate, seed, then the web server."""

import os

from django.core.management import call_command
from django.core.management.base import BaseCommand

ADDRESS = os.environ.get("DEMO_ADDRESS", "127.0.0.1:8000")


class Command(BaseCommand):
    help = "Migrate, seed demo data and serve the demo project."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        url = f"http://{ADDRESS}"
        self.stdout.write(
            f"\nThe demo runs at {url}/\n"
            f"  admin console: {url}/admin/  (login admin / admin)\n"
            f"  API:           {url}/api/orders/  (HTTP Basic alice / alice)\n"
            f"  try: curl -u alice:alice -H 'Idempotency-Key: demo-1' "
            f'-H \'Content-Type: application/json\' -d \'{{"sku": "BOOK-1", '
            f'"quantity": 1}}\' {url}/api/orders/\n'
        )
        call_command("runserver", ADDRESS, use_reloader=False)
