"""The inbox's proof kit: run the failure cases against your own consumers.

``suites.ConsumerSuite`` and the checks behind it (``consumers``).
"""
