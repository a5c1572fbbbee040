"""Services: the use cases behind the routes, built on the store, embedder and chunker."""
