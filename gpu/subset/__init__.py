"""gpu.subset.search."""
