"""In-memory implementations of the ports: the reference the contract suites hold the real adapters
to, and the stubs unit tests run on (no Redis, no Qdrant)."""
