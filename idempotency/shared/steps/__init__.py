"""Durable steps and keyed compensations, shared by every unit of work.

A keyed request, an inbox delivery and a webhook receipt each run steps
through a ``Steps`` handle (``begin``); an operator gives a stuck unit up
with ``compensate``. See docs/steps.md.
"""

from .compensation import COMPENSATION_LEASE, compensate
from .exceptions import (
    Abandon,
    CompensationFailed,
    CompensationInProgress,
    StepError,
    StepInTransaction,
    StepResultNotJSON,
    StepTakenOver,
    UndoNotImportable,
    UnitFinished,
    UnitRunning,
)
from .handle import Steps, begin

__all__ = [
    "COMPENSATION_LEASE",
    "Abandon",
    "CompensationFailed",
    "CompensationInProgress",
    "StepError",
    "StepInTransaction",
    "StepResultNotJSON",
    "StepTakenOver",
    "Steps",
    "UndoNotImportable",
    "UnitFinished",
    "UnitRunning",
    "begin",
    "compensate",
]
