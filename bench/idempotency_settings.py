"""The keys benchmark's server: the bench settings, Basic auth hashed cheaply."""

from bench.settings import *  # noqa: F403

# Clients log in with HTTP Basic on every request: PBKDF2 (by design slow)
# would be most of each request's cost, so hash with MD5 here. Bench only.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
