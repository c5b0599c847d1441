"""Errors of the shape grid. All are NpuperfError: one line, printed as is by the CLI."""

from __future__ import annotations

from ..db.errors import NpuperfError


class GridError(NpuperfError):
    """A grid configuration or run that cannot be carried out."""


class ConfigError(GridError):
    """The grid configuration (YAML) is malformed or does not follow the schema."""


class ExpressionError(GridError):
    """An expression is invalid, or failed when evaluated (names the pattern and expression)."""


class UnsafeExpressionError(ExpressionError):
    """An expression uses a construct the safe evaluator does not allow (never executed)."""


class UnknownModelError(GridError):
    """A model name that neither the built-in models nor a model file describe."""


class UnknownKernelError(GridError):
    """A kernel type that the grid configuration does not assign a pattern to."""


class BudgetError(GridError):
    """The memory budget is below every candidate row of a kernel."""
