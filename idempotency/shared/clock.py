"""The one clock the apps read, so TTL, lease and backoff tests never sleep."""

import time

from django.utils import timezone


def now():
    return timezone.now()


def sleep(seconds: float) -> None:
    time.sleep(seconds)
