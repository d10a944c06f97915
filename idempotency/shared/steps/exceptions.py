"""What steps raise: ``Abandon`` (user code giving up) and their refusals."""

from ..exceptions import OnceError


class Abandon(Exception):
    """Raise it from a step (or between steps) to give the unit up for good:
    the undos of its completed steps run, in reverse order, once each."""

    def __init__(self, reason: str = "abandoned"):
        super().__init__(reason)
        self.reason = reason


class StepError(OnceError):
    """Base of the steps' refusals: raised to the caller, never answered."""

    title = "Step error"


class StepInTransaction(StepError):
    """A step that calls out was run inside an open transaction: a rollback
    would erase its recovery point while the outside effect stays."""

    title = "A step cannot run inside an open database transaction"


class StepResultNotJSON(StepError):
    title = "A step's result must be JSON"


class UndoNotImportable(StepError):
    """An undo must be found again by its dotted path, by another process or
    the console, without the code that registered it running."""

    title = "An undo must be a module-level function"


class StepTakenOver(StepError):
    """A newer attempt joined the unit (this one's lease ran out, or an
    operator abandoned it), or this attempt finished it: this attempt
    stores nothing more."""

    status = 409
    title = "A newer attempt took this unit over"
    retry_after = 1


class CompensationInProgress(StepError):
    status = 409
    title = "Another worker is compensating this unit"
    retry_after = 1


class CompensationFailed(StepError):
    """An undo raised: the unit stays "compensating" with the error, and the
    next abandon continues from the undo that failed."""

    title = "A compensation failed; the next abandon continues it"


class UnitFinished(StepError):
    """A unit that finished is not compensated: it did what was asked."""

    status = 409
    title = "This unit finished; it is not compensated"


class UnitRunning(StepError):
    """An operator cannot abandon a unit whose worker holds a live lease: it
    may be mid-call, and an effect without a recovery point has no undo."""

    status = 409
    title = "This unit is running; wait for its lease to lapse"
