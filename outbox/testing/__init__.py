"""The outbox's proof kit: the events a test records, each published twice to
its consumer (``events``); the ``once_events`` fixture (``plugin``).
"""
