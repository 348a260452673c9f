"""Langshaw roles and MCP, the Model Context Protocol, both ways.

- :class:`RoleServer` serves one agent's role as MCP tools (``strabo mcp``): any
  MCP client can then enact the protocol while the adapter enforces it.
- :class:`MCPTools` gives an agent (an :class:`~peach.llm.LLMAgent` or coded)
  the tools of an MCP server as actions, through before and after hooks that
  keep credentials away from the model.

Importing this package loads the MCP SDK (and with it Starlette); ``peach`` and
``peach.llm`` never import it.
"""

from peach.mcp.client import MCPResult, MCPToolError, MCPTools
from peach.mcp.server import RoleServer, ToolError

__all__ = ["MCPResult", "MCPToolError", "MCPTools", "RoleServer", "ToolError"]
