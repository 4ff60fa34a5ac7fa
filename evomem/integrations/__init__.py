"""Adapters for agent frameworks, each behind its own extra and imported only by name:
``evomem.integrations.langgraph`` (``evograph-mem[langgraph]``), ``evomem.integrations.openai_agents``
(``evograph-mem[openai-agents]``) and ``evomem.integrations.pydantic_ai`` (``evograph-mem[pydantic-ai]``).

Importing ``evomem`` loads none of them, nor any framework. What they share, how a run's end becomes
a task event, is ``evomem.integrations.outcomes``, which needs no framework."""
