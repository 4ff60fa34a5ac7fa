"""Test utilities shipped with the package (as ``structlog.testing`` is): an OpenAI-compatible test
endpoint with scripted faults, a launcher for llama.cpp's local server, and seeding helpers shared
by the tests, the benchmarks and the demo."""
