"""The project's benchmarks that are not shipped in the wheel (run from a checkout)."""
