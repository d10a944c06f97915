"""Verifiers: one small class per provider behind ``base.BaseVerifier``."""
