"""The proof kits' shared machinery: crashes, threads, the clock, the reports
of a broken guarantee, the suites' base and the messages consumers get.

Each app's kit (``idempotency.testing``, ``inbox.testing``,
``outbox.testing``, ``webhooks.testing``) builds on it; it imports only
Django, pytest and ``idempotency.shared``.
"""
