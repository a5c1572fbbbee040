"""The operator's Kubernetes face: kopf handlers, the reconcile state machine, status and Secrets.

The only package that imports kopf and the kubernetes client.
"""
