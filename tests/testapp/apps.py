from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The suite's Celery app is the one the apps' code and every thread
        # use: the demo's package (installed for its own tests) made its own
        # app the current one when Django imported it.
        from tests.celery import app

        app.set_default()
        app.set_current()
