"""The memory as a Model Context Protocol server (``evomem mcp``); needs the ``mcp`` extra."""
