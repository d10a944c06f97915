"""Signed webhook intake: verify, dedupe by delivery id, persist, process once."""
