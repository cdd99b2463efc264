"""Errors that reach the user as one line (run_engine.py prints them and exits 2)."""


class UserError(Exception):
    """Bad input from the user: a wrong path, a malformed file, an impossible option."""


class StrategyError(UserError):
    """The user's strategy raised: one line naming the strategy, the bar and the error."""
