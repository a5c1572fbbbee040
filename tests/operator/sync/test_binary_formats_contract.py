"""The operator's table of binary formats is the service's, pinned here rather than imported.

The two programs never import each other (import-linter), so the operator keeps its own short
`BINARY_EXTENSIONS`: the files it sends base64-encoded. The service's `FORMATS` is the one
declaration of formats; this test fails the day a binary format is added to it and not to the operator
(whose file would then be refused as text, or decoded and mangled).
"""

from __future__ import annotations

from kboperator.sync.documents import BINARY_EXTENSIONS
from kbsearch.convert.formats import FORMATS


def test_the_operator_sends_base64_exactly_what_the_service_reads_as_bytes() -> None:
    service_binary = {extension for fmt in FORMATS if fmt.binary for extension in fmt.extensions}
    assert set(BINARY_EXTENSIONS) == service_binary


def test_every_binary_extension_is_lower_case_with_its_dot() -> None:
    # The operator compares lower-cased suffixes from posixpath.splitext, which keep the dot.
    assert all(extension.startswith(".") and extension == extension.lower() for extension in BINARY_EXTENSIONS)
