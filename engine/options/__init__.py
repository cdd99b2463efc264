"""Options: the option groups the engine reprices with their underlyings, one component
behind `protocol.OptionPricing` (built by `book.open_option_book`; implementations in
`in_process` and `worker_options`, the worker split into `worker_*` modules), and the
valuation of a quoted option chain (`chain_pricing`, the `price` command's library)."""
