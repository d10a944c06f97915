# The outbox tests' fixture: what the InMemoryPublisher published.
from tests.outbox.conftest import sent  # noqa: F401
