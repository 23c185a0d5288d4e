"""What the agent says: Node conditions, Events, metrics, the journal, `nodeagent status`."""
