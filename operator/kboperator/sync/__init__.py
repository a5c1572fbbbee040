"""The kopf-free sync engine that `knowledge-sync` shares: diff a checkout, push changed documents."""
