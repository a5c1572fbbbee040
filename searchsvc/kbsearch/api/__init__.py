"""HTTP layer: routes, auth, error mapping and middleware."""
