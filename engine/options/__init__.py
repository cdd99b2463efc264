"""Options: option groups repriced with their underlyings (`book`, `group`, `worker`) and
the valuation of a quoted option chain (`chain_pricing`, the `price` command's library)."""
