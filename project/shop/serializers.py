from rest_framework import serializers

from .models import Order


class OrderSerializer(serializers.ModelSerializer):
    quantity = serializers.IntegerField(min_value=1, max_value=1000)

    class Meta:
        model = Order
        fields = ["id", "sku", "quantity", "status"]
        read_only_fields = ["id", "status"]
