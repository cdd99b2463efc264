"""gpu.gp."""
