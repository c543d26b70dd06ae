"""The project's exceptions: each one's message names the problem and the fix."""


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
