"""hack/matrix: the real-node scenarios and the own-node refusals per Kubernetes version pair."""
