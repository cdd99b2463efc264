"""The live daemon's re-evolution settings: the `[reevolve]` table of the engine's TOML.

Re-evolution is off unless `at` is set. At `at` (HH:MM on the exchange's clock,
`timezone`, New York by default) in data time, every day, the daemon evolves new GP rules
in a background process on the last `train_days` days of the daily OHLCV file `data` up to
that day (the traded symbols, or `symbols`), `population` x `generations`, seed `seed` +
the rule version, within `gpu_seconds` of evolution; the result is swapped in at the next
session boundary (engine/live/reevolution.py).
"""

from __future__ import annotations

import msgspec

from engine.settings.bounds import require_non_negative


class ReevolveSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: time of day (HH:MM, exchange time) of the daily re-evolution; "" = never
    at: str = ""
    #: daily OHLCV CSV(.gz) the rules are evolved on ("" = the shared S&P file)
    data: str = ""
    #: stocks to evolve on (default: the symbols the daemon trades that the file has)
    symbols: list[str] = []
    train_days: int = 252
    population: int = 1000
    generations: int = 10
    seed: int = 1
    device: str = "auto"
    #: evolution time allowed, seconds (0 = no limit): past it the current rule is kept
    gpu_seconds: float = 600.0
    #: trade the vote of the hall of fame's top K rules
    ensemble: int = 1

    def __post_init__(self) -> None:
        require_non_negative(self, "reevolve", ("gpu_seconds",))
        if self.at:
            at_seconds(self.at)  # a bad time is an error at start-up, not at 16:30
        if self.train_days < 2 or self.population < 2 or self.generations < 1:
            raise ValueError("reevolve: train_days and population must be >= 2, generations "
                             ">= 1")
        if not 1 <= self.ensemble <= 10:
            raise ValueError(f"reevolve.ensemble must be 1..10, got {self.ensemble}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"reevolve.device must be auto, cpu or cuda, got {self.device!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.at)


def at_seconds(text: str) -> int:
    """Seconds after local midnight of `HH:MM`; ValueError (one line) otherwise."""
    hh, sep, mm = text.strip().partition(":")
    try:
        h, m = int(hh), int(mm)
    except ValueError:
        h = m = -1
    if not sep or not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(f"reevolve.at must be HH:MM, got {text!r}")
    return h * 3600 + m * 60
