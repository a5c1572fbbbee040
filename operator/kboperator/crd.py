"""The KnowledgeSource API names, fixed by crds/knowledgesources.yaml and the Helm chart."""

GROUP = "kb.knowledgebase.dev"
VERSION = "v1alpha1"
KIND = "KnowledgeSource"
PLURAL = "knowledgesources"
FINALIZER = f"{GROUP}/cleanup"
#: Set it to any new value (a timestamp, say) to ask for an immediate full sync, once.
SYNC_REQUEST_ANNOTATION = f"{GROUP}/sync-requested-at"
#: The annotation's value a webhook sets (`push:<time>:<delivery id>`): an incremental sync, not a full one.
PUSH_REQUEST_PREFIX = "push:"
