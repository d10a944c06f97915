"""Transactional outbox: a state change and its event commit together."""
