"""Webhook deliveries from git hosts, without any server or Kubernetes: signatures and push events."""
