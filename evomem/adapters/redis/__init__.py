"""Redis: the system of record (graph, event log, change feed, decisions, retrieval records), the
embedded server, quotas, tenancy and transfer. Every client evomem makes maps redis-py's exceptions
into ``evomem.errors`` (``connection.connect``)."""
