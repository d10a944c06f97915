from django.contrib import admin

from .models import Order, Stock


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "sku", "quantity", "status", "created_at"]
    list_filter = ["status"]
    search_fields = ["sku"]


@admin.register(Stock)
class StockAdmin(admin.ModelAdmin):
    list_display = ["sku", "on_hand", "reserved"]
    search_fields = ["sku"]
