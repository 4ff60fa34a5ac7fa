"""Benchmarks that run against the public SDK from outside the library (not part of the wheel)."""
