"""The SDK: a memory in this process (``local``) or a client of a retrieval service (``remote``)."""
