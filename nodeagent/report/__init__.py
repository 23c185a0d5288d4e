"""What the agent says: Node conditions, Events, metrics, `nodeagent status`."""
