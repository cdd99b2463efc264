"""Numerical work on the GPU with CPU twins (one core per kernel, gpu/twin.py), and options."""
