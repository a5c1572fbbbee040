"""The MCP face of the service: tools for agents over the same services and scope checks as the REST API."""
