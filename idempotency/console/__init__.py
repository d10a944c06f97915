"""The operations console in the Django admin, shared by all four apps.

Nothing here is imported unless ``django.contrib.admin`` is installed and
the console is used: an API-only project never loads it.
"""

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured


def require_admin(module: str) -> None:
    """Refuse to load ``module`` of the console without the admin installed:
    Django's own refusal, a RuntimeError about ``LogEntry``'s app_label,
    names neither the console nor the missing app."""
    if not apps.is_installed("django.contrib.admin"):
        raise ImproperlyConfigured(
            f"{module} needs 'django.contrib.admin' in INSTALLED_APPS: the "
            "console's pages are admin views and its actions are logged in "
            "the admin log. Install it (with 'django.contrib.auth', "
            "'django.contrib.contenttypes', 'django.contrib.sessions' and "
            "'django.contrib.messages'), or leave the console out."
        )
