"""nodeagent: makes a Kubernetes node's departure graceful."""

__version__ = "0.1.0"
