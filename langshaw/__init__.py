"""Langshaw: declarative interaction protocols.

Parse a protocol with :meth:`LangshawProtocol.load` or :meth:`LangshawProtocol.parse`,
then ask :class:`SocialState` which actions a role may perform and whether an
attempt is legal.
"""

from langshaw.diagnostics import (
    Diagnostic,
    LangshawError,
    LangshawSyntaxError,
    LangshawValidationError,
)
from langshaw.model import Action, LangshawProtocol
from langshaw.semantics import (
    ABSENT,
    FRESH,
    ActionInstance,
    Enablement,
    Enactment,
    SocialState,
    Violation,
)
from langshaw.types import AttributeType, TypeProblem
from langshaw.values import json_equal

__all__ = [
    "ABSENT",
    "FRESH",
    "Action",
    "ActionInstance",
    "AttributeType",
    "Diagnostic",
    "Enablement",
    "Enactment",
    "LangshawError",
    "LangshawProtocol",
    "LangshawSyntaxError",
    "LangshawValidationError",
    "SocialState",
    "TypeProblem",
    "Violation",
    "json_equal",
]
