"""The keys' proof kit: run the failure cases against your own keyed views.

``suites.EndpointSuite`` and the checks behind it (``endpoints``). The other
apps' kits live in ``inbox.testing``, ``outbox.testing`` and
``webhooks.testing``, the machinery they share in
``idempotency.shared.testing``; ``plugin`` is the pytest entry point that
loads every kit's fixtures. This package imports nothing, so the plugin costs
nothing to load.
"""
