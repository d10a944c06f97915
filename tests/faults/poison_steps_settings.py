"""Settings of the worker whose steps consumer kills it on every run: the
poison settings, with a steps lease of two seconds, so each redelivery takes
the dead worker's delivery over within seconds."""

from datetime import timedelta

from tests.faults.poison_settings import *  # noqa: F403
from tests.faults.poison_settings import INBOX

INBOX = {**INBOX, "STEPS_LEASE": timedelta(seconds=2)}
