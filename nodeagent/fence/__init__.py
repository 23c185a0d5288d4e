"""The node's fence: the marker on the Node, the vocabulary of reasons, and the pure
decision of what should be."""
