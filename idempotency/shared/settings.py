"""Settings objects for all four apps: one dict each, a table of options, validated.

Each app describes its ``settings.<NAMESPACE>`` dict as a table of ``Option``
(default, validator, system check id). The same validators run in two places:
the app's system check (every problem, as ``Error`` objects) and the first
read of any value in the running server, which refuses a bad configuration
with ``ImproperlyConfigured`` instead of running with a guarantee switched off
(gunicorn and uwsgi run no checks).
"""

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .exceptions import InvalidSetting

# Longer than any retention or lease means a typo (milliseconds for seconds).
MAX_DURATION = timedelta(days=3653)


@dataclass(frozen=True)
class Option:
    """One key of a settings dict: its default and how a value is checked."""

    default: Any
    # ``(value) -> value to use``; raises InvalidSetting. Runs on defaults too.
    validate: Callable[[Any], Any]
    # The system check id that reports a bad value.
    check_id: str
    hint: str = ""
    # What the option means: the settings page (docs/reference.py) is made
    # of these, and tests/test_docs.py fails on an option without one.
    doc: str = ""


@dataclass(frozen=True)
class Problem:
    """A bad value, as both a system check and a runtime error report it."""

    where: str
    message: str
    check_id: str
    hint: str = ""

    def __str__(self):
        text = f"{self.where} {self.message}"
        return f"{text} {self.hint}" if self.hint else text

    def as_check(self) -> Error:
        return Error(
            f"{self.where} {self.message}", hint=self.hint or None, id=self.check_id
        )


def validate_dict(
    where: str,
    value: Any,
    options: Mapping[str, Option],
    *,
    shape_id: str,
    unknown_id: str = "",
    partial: bool = False,
) -> tuple[dict, list[Problem]]:
    """Validate a settings dict against ``options``; never raises.

    Return the values to use (defaults filled in, normalised) and every
    problem found, so one run of ``check`` reports them all. ``partial``: the
    options are some of the dict's keys, so other keys are not unknown.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return {}, [
            Problem(
                where,
                f"must be a dict, not {type(value).__name__}.",
                shape_id,
                "See the settings table in the README.",
            )
        ]
    problems = []
    unknown = sorted(str(name) for name in set(value) - set(options))
    if unknown and not partial:
        problems.append(
            Problem(
                where,
                f"has unknown key(s): {', '.join(unknown)}.",
                unknown_id or shape_id,
                f"Known keys: {', '.join(options)}.",
            )
        )
    resolved = {}
    for name, option in options.items():
        raw = value.get(name, option.default)
        try:
            resolved[name] = option.validate(raw)
        except InvalidSetting as exc:
            problems.append(
                Problem(
                    f"{where}[{name!r}]",
                    str(exc),
                    exc.check_id or option.check_id,
                    exc.hint or option.hint,
                )
            )
        except Exception as exc:  # a validator must never crash a check
            problems.append(
                Problem(
                    f"{where}[{name!r}]",
                    f"could not be validated: {exc!r}.",
                    option.check_id,
                    option.hint,
                )
            )
    return resolved, problems


def refuse(problems: list[Problem]) -> ImproperlyConfigured:
    """One error naming every problem, for the running server to raise."""
    return ImproperlyConfigured(
        "django-once refuses this configuration:\n"
        + "\n".join(f"- {problem} ({problem.check_id})" for problem in problems)
    )


class AppSettings:
    """Read one settings dict (``settings.<namespace>``) through its option table.

    The first attribute read validates the whole dict and raises
    ``ImproperlyConfigured`` listing every bad value; afterwards values are
    cached until ``reload()`` (connected to ``setting_changed`` so
    ``override_settings`` works). ``check()`` is the app's system check.
    ``partial``: these options are part of a dict another settings object
    owns, which reports its unknown keys.
    """

    def __init__(
        self,
        namespace: str,
        options: Mapping[str, Option],
        *,
        shape_id,
        partial: bool = False,
    ):
        self.namespace = namespace
        self.options = dict(options)
        self.shape_id = shape_id
        self.partial = partial
        self._values: dict | None = None

    @property
    def defaults(self) -> dict:
        return {name: option.default for name, option in self.options.items()}

    def raw(self) -> Any:
        """The project's setting as written (None when absent)."""
        return getattr(settings, self.namespace, None)

    def validate(self) -> tuple[dict, list[Problem]]:
        return validate_dict(
            self.namespace,
            self.raw(),
            self.options,
            shape_id=self.shape_id,
            partial=self.partial,
        )

    def merged(self) -> dict:
        """Every value, validated and normalised; raises on any problem."""
        if self._values is None:
            values, problems = self.validate()
            if problems:
                error = refuse(problems)
                # The server answers 500 and, with DEBUG off, Django logs that
                # nowhere visible: this line reaches stderr even with no LOGGING
                # (Python's last-resort handler).
                logging.getLogger(self.namespace.lower()).error("%s", error)
                raise error
            self._values = values
            # Kept as attributes, as DRF's api_settings does: later reads skip
            # __getattr__ (a keyed request reads a dozen).
            vars(self).update(values)
        return self._values

    def check(self, app_configs=None, **kwargs) -> list[CheckMessage]:
        return [problem.as_check() for problem in self.validate()[1]]

    def check_values(
        self, check: Callable[[dict], list[CheckMessage]]
    ) -> list[CheckMessage]:
        """The table's problems or, when it has none, ``check(values)``'s: a
        check of how the values fit together needs each of them valid."""
        values, problems = self.validate()
        if problems:
            return [problem.as_check() for problem in problems]
        return check(values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.options:
            raise AttributeError(f"Invalid {self.namespace} setting: {name!r}")
        return self.merged()[name]

    def reload(self) -> None:
        for name in self.options:
            vars(self).pop(name, None)
        self._values = None

    def on_setting_changed(self, *, setting, **kwargs) -> None:
        if setting == self.namespace:
            self.reload()


# Validators: each returns the value to use or raises InvalidSetting.


def show(value) -> str:
    """A value as a message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def seconds(value: timedelta | float) -> str:
    """A duration as the checks print it: in seconds."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    # 15 significant digits: whole days print whole, never as 3.456e+06.
    return f"{value:.15g} s"


def as_timedelta(value) -> timedelta:
    """Accept a ``timedelta`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected seconds or a timedelta, got {value!r}")
    return timedelta(seconds=value)


def duration(value) -> timedelta:
    """A positive, finite duration up to ten years: seconds or a timedelta."""
    try:
        delta = as_timedelta(value)
    except (TypeError, OverflowError, ValueError):
        if isinstance(value, int | float) and not math.isfinite(value):
            raise InvalidSetting(
                f"must be finite, not {show(value)}.", "Give a number of seconds."
            ) from None
        raise InvalidSetting(
            f"must be seconds or a timedelta, not {show(value)}.",
            "For example 3600 or timedelta(hours=1).",
        ) from None
    if delta <= timedelta(0):
        raise InvalidSetting(
            f"must be more than 0 s, not {seconds(delta)}.",
            "A zero or negative duration would switch the guarantee off.",
        )
    if delta > MAX_DURATION:
        raise InvalidSetting(
            f"must be at most {seconds(MAX_DURATION)} (10 years), "
            f"not {seconds(delta)}.",
            "Durations are seconds, not milliseconds.",
        )
    return delta


def duration_of_at_least(floor: timedelta, why: str) -> Callable[[Any], timedelta]:
    """A ``duration`` no shorter than ``floor``; ``why`` says what a shorter
    one would switch off (the hint a refusal carries)."""

    def validate(value) -> timedelta:
        delta = duration(value)
        if delta < floor:
            raise InvalidSetting(
                f"must be at least {seconds(floor)}, not {seconds(delta)}.", why
            )
        return delta

    return validate


def positive_int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSetting(f"must be a positive integer, not {show(value)}.")
    return value


def positive_int_up_to(ceiling: int, why: str) -> Callable[[Any], int]:
    """A ``positive_int`` no larger than ``ceiling``; ``why`` is the hint a
    refusal carries."""

    def validate(value) -> int:
        count = positive_int(value)
        if count > ceiling:
            raise InvalidSetting(
                f"must be at most {ceiling:,}, not {show(count)}.", why
            )
        return count

    return validate


def boolean(value) -> bool:
    if not isinstance(value, bool):
        raise InvalidSetting(f"must be True or False, not {show(value)}.")
    return value


def instance_of(kind: type, article: str) -> Callable[[Any], Any]:
    def validate(value):
        if not isinstance(value, kind):
            raise InvalidSetting(
                f"must be {article} {kind.__name__}, not {type(value).__name__}."
            )
        return value

    return validate


string = instance_of(str, "a")
mapping = instance_of(dict, "a")


def one_of(*choices) -> Callable[[Any], Any]:
    def validate(value):
        if value not in choices:
            names = ", ".join(repr(choice) for choice in choices)
            raise InvalidSetting(f"must be one of {names}, not {show(value)}.")
        return value

    return validate


def string_list(value) -> tuple[str, ...]:
    """A list or tuple of strings (a bare string is refused, not iterated)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidSetting(
            f"must be a list of strings, not {type(value).__name__}.",
            "Write ['value'], not 'value'.",
        )
    if not all(isinstance(item, str) for item in value):
        raise InvalidSetting("must hold strings only.")
    return tuple(value)


def imported(value) -> Any:
    """Import a dotted path (other values pass); an ImportError is shown."""
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except ImportError as exc:
        raise InvalidSetting(
            f"cannot be imported: {show(value)}.", f"ImportError: {exc}"
        ) from None


def dotted_callable(value) -> Callable:
    """A callable, or the dotted path of one."""
    target = imported(value)
    if not callable(target):
        raise InvalidSetting(
            f"must be a callable or its dotted path, not {show(value)}.",
            "Give a dotted path to a function.",
        )
    return target


def subclass_of(base: type) -> Callable[[Any], type]:
    """A subclass of ``base``, or the dotted path of one."""

    def validate(value):
        target = imported(value)
        if not (isinstance(target, type) and issubclass(target, base)):
            raise InvalidSetting(
                f"must be a {base.__name__} subclass, not {show(value)}.",
                f"Give a dotted path to a subclass of {base.__qualname__}.",
            )
        return target

    return validate


def header_names(*, never: frozenset, hint: str, check_id: str):
    """A list of header names none of which is in ``never`` (lower case)."""

    def validate(value) -> tuple[str, ...]:
        names = string_list(value)
        refused = [name for name in names if name.lower() in never]
        if refused:
            raise InvalidSetting(
                f"lists {', '.join(refused)}.", hint, check_id=check_id
            )
        return names

    return validate
