"""Steps mode, the keys side: a keyed request as a unit of durable steps.

The claim commits first with a lease; the view runs in no transaction and
calls ``request.idempotency.step(...)``, each step committing its recovery
point on its own and renewing the key's lease as it goes. A retry after a
crash or a failure takes the key over and resumes at the first step without
a recovery point. ``Abandon`` raised by the view gives the unit up: its
completed steps are compensated, and the answer is an ``operation-abandoned``
problem, stored like any other, so retries replay it.
"""

from django.db import transaction

from .conf import idempotency_settings
from .exceptions import IdempotencyConfigurationError, LeaseLost, OperationAbandoned
from .models import IdempotencyRecord
from .shared import problems, steps
from .shared.conf import shared_settings
from .shared.settings import InvalidSetting, as_timedelta, seconds


def refuse_atomic_requests(using: str) -> None:
    """A steps-mode view runs in no transaction: one ATOMIC_REQUESTS opened
    around it would refuse every step, so refuse the view itself, saying how."""
    connection = transaction.get_connection(using)
    if connection.settings_dict.get("ATOMIC_REQUESTS") and connection.in_atomic_block:
        raise IdempotencyConfigurationError(atomic_requests_message(using))


def atomic_requests_message(using: str) -> str:
    return (
        f"A steps-mode view runs inside ATOMIC_REQUESTS (DATABASES[{using!r}]); "
        "mark it @transaction.non_atomic_requests (wrap the as_view() of a "
        "class) so each step commits on its own."
    )


def owner_retention():
    """How long a key can bring a retry into its unit: the keys' TTL."""
    return as_timedelta(idempotency_settings.TTL)


def within_unit_retention(ttl, where: str):
    """A steps-mode view's own TTL (``where`` names it), refused when it
    outlives UNIT_RETENTION, as the TTL setting is (``idempotency.E016``).

    Its finished units would be purged while its keys still bring retries:
    a retry of a request that died after its steps finished, before its
    answer was stored, would run them all again.
    """
    retention = shared_settings.UNIT_RETENTION
    if ttl > retention:
        raise InvalidSetting(
            f"{where} is {seconds(ttl)}, longer than IDEMPOTENCY['UNIT_RETENTION'] "
            f"({seconds(retention)}): its units would be purged while its keys "
            "still bring retries.",
            "Raise IDEMPOTENCY['UNIT_RETENTION'] or shorten the view's ttl.",
            check_id="idempotency.E016",
        )
    return ttl


def begin(claim, records) -> steps.Steps:
    """Join the claim's unit of steps, its lease renewed with the key's."""

    def renew(until) -> None:
        # Fenced on the claim's attempt, like the answer it will store.
        renewed = records.filter(
            pk=claim.record_id,
            attempts=claim.attempt,
            state=IdempotencyRecord.State.PENDING,
        ).update(locked_until=until)
        if not renewed:
            raise LeaseLost("The lease ran out and a newer attempt took this key.")

    def held() -> bool:
        # Locked before the unit, as the answer's transaction locks it.
        return (
            records.select_for_update()
            .filter(
                pk=claim.record_id,
                attempts=claim.attempt,
                state=IdempotencyRecord.State.PENDING,
            )
            .exists()
        )

    return steps.begin(
        claim.unit,
        # What the console shows; the raw key stays out of the step log.
        f"{claim.operation} for {claim.scope}",
        lease=as_timedelta(idempotency_settings.LEASE),
        using=records.db,
        fresh=claim.fresh,
        renew=renew,
        held=held,
    )


def abandoning(produce, request):
    """``produce``, answering a view's ``Abandon`` once its unit is compensated."""

    def run():
        try:
            response = produce()
            if request.idempotency.steps.given_up:
                # Joined a unit given up (an operator abandoned it) and called
                # no step: its answer is the abandon's, its undos still owed.
                raise steps.Abandon(request.idempotency.steps.reason)
            return response
        except steps.Abandon as abandon:
            request.idempotency.steps.give_up(abandon.reason)
            return abandoned(abandon, request)

    return run


def abandoned(abandon: steps.Abandon, request):
    """The answer to a view that gave its operation up (raised ``Abandon``)."""
    return problems.from_exception(
        OperationAbandoned(abandon.reason), instance=problems.instance_of(request)
    )
