"""Celery glue for the consolidation workers: thin tasks over ``evomem`` library functions."""
