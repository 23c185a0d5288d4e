"""What the agent says: Node conditions, Events, NodeAgentReady's findings, and the server
of the metrics (nodeagent/metrics.py) and /healthz. The reporting sinks sit just above kube:
they import no part that decides or drains, so every such part may report through them."""
