"""The demo shop's orders and stock."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        PAID = "paid", _("paid")
        PAYMENT_FAILED = "payment_failed", _("payment failed")

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="orders"
    )
    sku = models.CharField(_("SKU"), max_length=64)
    quantity = models.PositiveIntegerField(_("quantity"))
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.PENDING
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    payment_updated_at = models.DateTimeField(
        _("payment updated at"),
        null=True,
        blank=True,
        help_text=_("When the payment event behind the status happened."),
    )

    class Meta:
        ordering = ["-id"]
        verbose_name = _("order")
        verbose_name_plural = _("orders")

    def __str__(self):
        return f"Order {self.pk}: {self.quantity} x {self.sku}"


class Stock(models.Model):
    """What the warehouse holds; the inbox consumer reserves from it."""

    sku = models.CharField(_("SKU"), max_length=64, unique=True)
    on_hand = models.IntegerField(_("on hand"), default=0)
    reserved = models.PositiveIntegerField(_("reserved"), default=0)

    class Meta:
        ordering = ["sku"]
        verbose_name = _("stock")
        verbose_name_plural = _("stock")

    def __str__(self):
        return f"{self.sku}: {self.on_hand} on hand, {self.reserved} reserved"
