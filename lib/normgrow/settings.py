"""A profile key declared once, beside the code that reads it: the section's dataclass field gives its name, type and
default, and ``setting(default, ...)`` attaches its Rule: the allowed values or range, whether it is given per arm,
whether it is part of a run's identity, and whether only a run that grows reads it. The loader and validation
(config.py), the identity comparison (identity.NOT_COMPARED) and the keys a run never reads (train.spec.unread_keys)
all read these rules (config.RULES); no other table lists keys.

A key whose allowed values live in a module the section's module cannot import at its top (a registry of
components) gives them as a function, called on first use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Rule:
    # allowed values: a tuple, or a function returning them (a registry imported on first use)
    choices: tuple | Callable[[], tuple] | None = None
    # (the allowed range as an error says it, its test); every float is also checked finite
    range: tuple[str, Callable[[Any], bool]] | None = None
    # one value, or one per placement (and schedule): (the value's type, its range as an error says it, its test, an
    # example mapping); train.spec.for_arm resolves it for a run
    per_arm: tuple[type, str, Callable[[Any], bool], str] | None = None
    device: bool = False  # auto | cpu | mps | cuda | cuda:N
    compared: bool = True  # part of a run's identity: a run recorded under another value is another run
    grows_only: bool = False  # read only by a run that grows: a joint or single run records its default

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


PLAIN = Rule()
POSITIVE = ("> 0", lambda v: v > 0)
NON_NEGATIVE = (">= 0", lambda v: v >= 0)
UNIT_INTERVAL = ("in [0, 1]", lambda v: 0 <= v <= 1)
"""The ranges several keys share (Rule.range)."""


def setting(default: Any, **rule: Any) -> Any:
    """A dataclass field with this default and Rule(**rule) (a sequence default is a tuple: immutable, shared safely)."""
    return field(default=default, metadata={"rule": Rule(**rule)})


def rule_of(f) -> Rule:
    """The Rule a dataclass field declares (PLAIN: a value of its type, nothing more)."""
    return f.metadata.get("rule", PLAIN)
