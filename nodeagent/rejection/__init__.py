"""Pods the kubelet rejected at admission: wipe their node-local state, report, re-create."""
