"""The test suite, grouped like the packages (feeds, gpu, strategies, engine) plus integration."""
