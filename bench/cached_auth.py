"""Authentication without a query: the bench's cheap one, beside the database's.

``Authorization: Bench <username> <token>`` names a user looked up once per
process and kept; later requests cost a dict lookup. Session and HTTP Basic
authentication read the database on every request, which hides the keys'
own cost in every ratio to the bare view. Bench only: the token is fixed.
"""

import hmac

from django.contrib.auth import get_user_model
from rest_framework import authentication, exceptions

TOKEN = "bench-cached-user-token"
_users: dict = {}


def header(username: str) -> str:
    return f"Bench {username} {TOKEN}"


class CachedUserAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        parts = request.META.get("HTTP_AUTHORIZATION", "").split()
        if len(parts) != 3 or parts[0] != "Bench":
            return None  # the next class (Basic, session) decides
        username, token = parts[1], parts[2]
        if not hmac.compare_digest(token, TOKEN):
            raise exceptions.AuthenticationFailed("Wrong bench token.")
        user = _users.get(username)
        if user is None:
            user = get_user_model().objects.get(username=username)
            _users[username] = user
        return user, None
