from django.conf import settings
from django.db import models


class Widget(models.Model):
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.name


class Order(models.Model):
    """An order whose creation records an ``order.created`` event (orders.py)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        PAID = "paid"
        PAYMENT_FAILED = "payment_failed"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    sku = models.CharField(max_length=64)
    quantity = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When the payment event behind the status happened (webhook handlers).
    payment_updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"Order {self.pk}: {self.quantity} x {self.sku}"


class Stock(models.Model):
    """What ``tasks.reserve_stock``, an inbox consumer, reserves from."""

    sku = models.CharField(max_length=64, unique=True)
    on_hand = models.IntegerField(default=0)
    reserved = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["sku"]

    def __str__(self):
        return f"{self.sku}: {self.on_hand} on hand, {self.reserved} reserved"


class Payment(models.Model):
    """A captured payment (``payments.py``): written once per keyed request,
    in the same step as its ``payment.captured`` event."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    amount = models.PositiveIntegerField()
    email = models.EmailField()
    # The provider's id of the charge.
    charge = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"Payment {self.pk}: {self.amount} ({self.charge})"
