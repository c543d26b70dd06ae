"""The project's exceptions: each one's message names the problem and the fix; `one_line` says one."""
from __future__ import annotations


class FedreproError(Exception):
    """Base class: a user-facing failure with an actionable message."""


class ConfigError(FedreproError):
    """An invalid configuration value or choice (raised before any work starts)."""


class DataError(FedreproError):
    """A data file is missing, damaged or in the wrong place."""


class DivergenceError(FedreproError):
    """Training produced a non-finite loss or parameter vector."""

    def __init__(self, message: str, round: int):
        super().__init__(message)
        self.round = round


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """'Type: first line of the message', at most `limit` characters."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.strip().split("\n")[0].split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
