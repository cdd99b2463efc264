"""gpu.ising.lattice."""
