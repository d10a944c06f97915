"""The proof kits' one pytest entry point (``pytest11``: ``django_once``).

Each app's kit registers its own fixtures in its own plugin; this names them,
so installing django-once gives every fixture. Names, not imports: loading it
imports nothing, and no kit imports another's.
"""

pytest_plugins = [
    "idempotency.shared.testing.plugin",  # the once marker, once_clock
    "outbox.testing.plugin",  # once_events
    "webhooks.testing.plugin",  # once_webhooks
]
