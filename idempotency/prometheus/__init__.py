"""Prometheus metrics: the /metrics view, the gauges read at scrape, and the
counters of what the four apps share (docs/observability.md, "Metrics")."""
