"""One module per command of `run_engine.py`.

Each module exposes `add_arguments(parser: argparse.ArgumentParser) -> None` and
`run(args: argparse.Namespace) -> dict[str, object]`: `run` prints the short human summary,
shows progress on stderr for long work, and returns the JSON-able results that
`run_engine.py --json PATH` writes. A user error raises `engine.errors.UserError` with a
one-line message; run_engine.py prints it and exits 2.
"""
