"""The stages of the pipeline, on the core's ports only: retrieve (the agent's read path), consolidate
(events to committed edits), the worker loop around it, and project (the system of record into the
read model)."""
