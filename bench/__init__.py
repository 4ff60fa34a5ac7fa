"""The project's benchmarks: run from a checkout (``python -m bench.<suite>``), not shipped in the wheel."""
