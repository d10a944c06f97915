"""Create the demo's users and a few orders; safe to run again."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from project.shop.models import Order, Stock

DEMO_USERS = (
    # username, password, staff
    ("admin", "admin", True),
    ("alice", "alice", False),
    ("bob", "bob", False),
)


class Command(BaseCommand):
    help = "Create the demo users (admin/admin, alice/alice, bob/bob) and orders."

    def handle(self, *args, **options):
        User = get_user_model()
        for username, password, staff in DEMO_USERS:
            user, created = User.objects.get_or_create(
                username=username,
                defaults={"is_staff": staff, "is_superuser": staff},
            )
            if created:
                user.set_password(password)
                user.save()
        alice = User.objects.get(username="alice")
        if not Order.objects.filter(owner=alice).exists():
            Order.objects.create(owner=alice, sku="BOOK-1", quantity=1)
            Order.objects.create(
                owner=alice, sku="MUG-2", quantity=2, status=Order.Status.PAID
            )
        for sku in ("BOOK-1", "MUG-2"):
            Stock.objects.get_or_create(sku=sku, defaults={"on_hand": 100})
        self.stdout.write("Demo users: admin/admin (staff), alice/alice, bob/bob")
