"""QuantLib's Black–Scholes process for reference prices (tests import QuantLib lazily)."""

from __future__ import annotations

from typing import Any


def bs_process(today: Any, spot: float, vol: float, rate: float,
               dividend_yield: float = 0.0) -> Any:
    """Flat rate and continuous dividend yield (0: none), constant vol, Actual/365 from
    `today` (a ql.Date); sets QuantLib's evaluation date to `today`."""
    import QuantLib as ql

    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    return ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(spot)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, dividend_yield, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, rate, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), vol, dc)),
    )
