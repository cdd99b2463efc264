"""Tests of feeds."""
