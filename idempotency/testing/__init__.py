"""The proof kit: run the failure cases against your own views and consumers.

Import the public helpers from their modules (``idempotency.testing.suites``,
``.endpoints``, ``.consumers``, ``.deliveries``, ``.events``, ``.signing``);
this package imports nothing, so the pytest plugin costs nothing to load.
"""
