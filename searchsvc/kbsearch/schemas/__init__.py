"""The v1 HTTP contract's request and response bodies, one module per resource.

Import from the module that holds a body (`kbsearch.schemas.search`); this package re-exports nothing.
"""
