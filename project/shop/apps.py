from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ShopConfig(AppConfig):
    name = "project.shop"
    label = "shop"
    verbose_name = _("Demo shop")
    default_auto_field = "django.db.models.BigAutoField"
