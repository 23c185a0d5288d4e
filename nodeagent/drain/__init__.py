"""The drain engine: evict a node's pods within a deadline, respecting PodDisruptionBudgets."""
