"""The Kubernetes client pieces: requests, credentials, watches, a work queue."""
