"""Tests of the gpu package: kernels against references (simulator in CI, `-m gpu` on a GPU)."""
