"""The operations console in the Django admin, shared by all four apps.

Nothing here is imported unless ``django.contrib.admin`` is installed and
the console is used: an API-only project never loads it.
"""
