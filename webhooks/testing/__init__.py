"""The webhooks' proof kit: run the failure cases against your own handlers.

``suites.WebhookSuite`` and the checks behind it (``deliveries``), deliveries
signed as each provider signs them (``signing``, through the verifiers'
``sign()``), the ``once_webhooks`` fixture (``plugin``).
"""
