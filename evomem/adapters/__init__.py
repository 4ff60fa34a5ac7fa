"""Implementations of the core's ports, one package per vendor: ``redis`` (the system of record and
the event log), ``qdrant`` (the read model), ``llm`` (the LLM controller), ``memory`` (in-memory
stubs for tests), ``embedders``. Each maps its vendor's exceptions into ``evomem.errors``."""
