"""An output option refuses to overwrite a file that is not its own kind: the returns CSV
of `evolve` is known by its header alone (`date` and `hof<k>` columns, k in ASCII
digits), whatever other text a column name holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.errors import UserError
from engine.reporting.outputs import check_own_kind

SUFFIXES = st.lists(st.text(max_size=6).filter(lambda t: not set(t) & {",", "\n", "\r"}),
                    min_size=1, max_size=4)


@example(suffixes=["¹"])  # str.isdigit() is true for it; the header is still not evolve's
@example(suffixes=["٣"])
@example(suffixes=["0"])
@settings(max_examples=100, deadline=None)
@given(suffixes=SUFFIXES)
def test_a_returns_csv_is_known_by_ascii_hof_columns(
        tmp_path_factory: pytest.TempPathFactory, suffixes: list[str]) -> None:
    path: Path = tmp_path_factory.mktemp("kinds") / "r.csv"
    cols = ["date", *(f"hof{s}" for s in suffixes)]
    path.write_text(",".join(cols) + "\n2020-01-02," + ",".join("0.0" for _ in suffixes) + "\n",
                    encoding="utf-8")
    own = all(s.strip().isascii() and s.strip().isdigit() for s in suffixes)
    if own:
        check_own_kind(path, "returns-csv", "--returns-out")
    else:
        with pytest.raises(UserError, match="exists and is not a returns CSV"):
            check_own_kind(path, "returns-csv", "--returns-out")
