"""The tearsheet (report.html): every number it shows is report.json's, its drawdown periods
and monthly returns equal a pandas recomputation from equity.csv, and it is one file that
needs no network."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import run_engine
from tests.helpers import daily_csv


class _Page(HTMLParser):
    """Elements with data-* attributes, with their shown text; every img src and link."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, Any]] = []
        self.srcs: list[str] = []
        self._open: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.srcs.append(a.get("src", ""))
        if tag in ("script", "link", "iframe"):
            self.srcs.append(a.get("src", "") or a.get("href", "") or tag)
        if any(k.startswith("data-") for k in a):
            self._open.append({"tag": tag, **a, "text": ""})

    def handle_data(self, data: str) -> None:
        for cell in self._open:
            cell["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1]["tag"] == tag:
            self.cells.append(self._open.pop())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, _Page]:
    tmp = tmp_path_factory.mktemp("tearsheet")
    data = daily_csv(tmp / "d.csv", 300, seed=9)
    out = tmp / "out"
    assert run_engine.main(["replay", "--data", str(data), "--strategy", "sma-cross:5,25",
                            "--device", "cpu", "--out", str(out)]) == 0
    page = _Page()
    page.feed((out / "report.html").read_text())
    return json.loads((out / "report.json").read_text()), out, page


def _lookup(report: dict, key: str) -> Any:
    value: Any = report
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def test_every_number_shown_is_the_reports(run: tuple[dict, Path, _Page]) -> None:
    report, _, page = run
    shown = [c for c in page.cells if "data-key" in c]
    keys = {c["data-key"] for c in shown}
    assert {"roi", "sharpe", "max_drawdown", "turnover_annual_one_way", "trades",
            "vs_buy_hold.beta", "vs_buy_hold.excess_ci95.0"} <= keys
    for c in shown:
        want = _lookup(report, c["data-key"])
        if want is None:
            assert c["text"] == "n/a"
            continue
        assert float(c["data-value"]) == want, c
        text = c["text"].replace(",", "").replace("$", "").rstrip("x")
        number = float(text.rstrip("%"))
        decimals = len(text.rstrip("%").partition(".")[2])
        scale = 100.0 if text.endswith("%") else 1.0
        assert abs(number - want * scale) <= 0.5 * 10.0**-decimals + 1e-9, c


def test_drawdown_periods_equal_pandas(run: tuple[dict, Path, _Page]) -> None:
    _, out, page = run
    eq = pd.read_csv(out / "equity.csv")
    under = eq["equity"] / eq["equity"].cummax() - 1.0
    below = under < 0
    group = (below != below.shift()).cumsum()[below]
    periods = []
    for _, idx in group.groupby(group).groups.items():
        first, last = idx[0], idx[-1]
        peak = first - 1
        recovery = last + 1 if last + 1 < len(eq) else None
        trough = under[first:last + 1].idxmin()
        periods.append({
            "start": eq["time"][peak], "trough": eq["time"][trough],
            "recovery": eq["time"][recovery] if recovery is not None else "",
            "depth": eq["equity"][trough] / eq["equity"][peak] - 1.0,
            "bars": (recovery if recovery is not None else len(eq) - 1) - peak,
        })
    periods.sort(key=lambda p: p["depth"])
    shown = [c for c in page.cells if c.get("class") == "drawdown"]
    assert len(shown) == min(5, len(periods)) > 0
    for c, p in zip(shown, periods, strict=False):
        assert (c["data-start"], c["data-trough"], c["data-recovery"]) == (
            p["start"], p["trough"], p["recovery"])
        assert float(c["data-depth"]) == pytest.approx(p["depth"], rel=1e-12)
        assert int(c["data-bars"]) == p["bars"]
    # the deepest is the report's max drawdown
    assert -float(shown[0]["data-depth"]) == pytest.approx(run[0]["max_drawdown"], rel=1e-12)


def test_monthly_returns_equal_pandas(run: tuple[dict, Path, _Page]) -> None:
    report, out, page = run
    eq = pd.read_csv(out / "equity.csv")
    local = pd.to_datetime(eq["ts"], unit="ns", utc=True).dt.tz_convert("America/New_York")
    month_end = eq.groupby(local.dt.strftime("%Y-%m").to_numpy())["equity"].last()
    want = month_end / month_end.shift(1, fill_value=report["initial_equity"]) - 1.0
    shown = {c["data-month"]: float(c["data-value"]) for c in page.cells if "data-month" in c}
    assert list(shown) == list(want.index)
    np.testing.assert_allclose(list(shown.values()), want.to_numpy(), rtol=1e-12)


def test_turnover_is_annualised_one_way(run: tuple[dict, Path, _Page]) -> None:
    report, out, _ = run
    fills = pd.read_csv(out / "fills.csv")
    eq = pd.read_csv(out / "equity.csv")
    notional = (fills["quantity"] * fills["price"]).sum()
    want = notional / 2 / eq["equity"].mean() * 252 / report["trading_days"]
    assert report["turnover_annual_one_way"] == pytest.approx(want, rel=1e-12)
    assert {"turnover", "drawdown", "annualisation"} <= set(report["definitions"])
    assert "252" in report["definitions"]["annualisation"]


def test_page_is_self_contained(run: tuple[dict, Path, _Page]) -> None:
    _, out, page = run
    text = (out / "report.html").read_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", text)
    assert len(page.srcs) >= 4
    for src in page.srcs:
        assert src.startswith("data:image/png;base64,"), src[:40]
        assert base64.b64decode(src.partition(",")[2])[:8] == b"\x89PNG\r\n\x1a\n"
    # the settings and the round trips are on the page
    settings = {c["data-setting"]: c["text"] for c in page.cells if "data-setting" in c}
    assert settings["fill"] == run[0]["fill"] and settings["strategy"] == run[0]["strategy"]
    assert text.count('<tr class="trade">') == min(run[0]["trades"], 500)
