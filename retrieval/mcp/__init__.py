"""Canon's MCP server: search, list_knowledge_bases and fetch for agents, over streamable HTTP
behind the API keys or over stdio (`manage.py canon_mcp`), thin adapters over the services the
REST API uses (`server` for the transport, `tools` for what each tool does)."""
