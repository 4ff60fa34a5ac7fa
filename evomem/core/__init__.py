"""The paper's algorithm as pure code: retrieval scoring (Eq. 2-10), edit planning (Eq. 13-18), the
controller contract and the rule controller, near-duplicate buckets, and the ports the pipeline
talks to. Nothing here imports a client library (``make lint`` checks it)."""
