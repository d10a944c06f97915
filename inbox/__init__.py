"""Idempotent inbox: a consumer applies each message once."""
