"""What all four apps share: settings objects, the clock, problem responses,
retention and the contributions each app declares. The keys feature is the
rest of the ``idempotency`` package; the console is ``idempotency.console``.
"""
