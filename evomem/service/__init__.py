"""The retrieval worker as an HTTP service: agents of any language retrieve and report over HTTP."""
