"""The cloud's early warnings, read from the node's own metadata endpoint (docs/architecture.md)."""
