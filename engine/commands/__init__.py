"""One module per command of `run_engine.py`.

Each module exposes `add_arguments(parser: argparse.ArgumentParser) -> None` and
`run(args: argparse.Namespace) -> dict[str, object]`: `run` prints the short human summary,
shows progress on stderr for long work, and returns the JSON-able results that
`run_engine.py --json PATH` writes (`--json -`: stdout, the summary then goes to stderr). A
user error raises `engine.errors.UserError` with a one-line message; run_engine.py prints it
and exits 2.

Settings: a flag that stands for a config key is declared with
`engine.settings.resolve.config_option` (argparse default None: a flag not given never overrides the
`--config` file) and read through `engine.settings.resolve.settings(args)`, the one merge of
default < file < flag. Numbers of every int/float option are checked once by
run_engine.py (`engine.settings.flags.check_numbers`); -v/-q are every command's (`args.quiet`:
no progress lines). An output path is checked before the work with
`engine.reporting.outputs.check_writable_file` and `check_own_kind` (never over another kind
of file).
"""
