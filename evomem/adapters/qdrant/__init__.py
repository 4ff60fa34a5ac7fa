"""Qdrant: the retrieval read model, embedded (Qdrant Edge) or on a server (qdrant-client)."""
