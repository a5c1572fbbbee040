"""Document formats to markdown-like text: one module per format, each the only user of its parser.

The chunker reads the result as markdown and knows nothing of formats. Conversions run in a child
process with memory and CPU limits (worker.py); the registry and the sniffing are in formats.py.
"""

from kbsearch.convert.base import Anchor, ConversionError, Converted, Converter
from kbsearch.convert.formats import FORMATS, MARKDOWN, TEXT, Format, check_bytes, resolve_format
from kbsearch.convert.worker import ConversionLimits, ConversionWorker

__all__ = [
    "FORMATS",
    "MARKDOWN",
    "TEXT",
    "Anchor",
    "ConversionError",
    "ConversionLimits",
    "ConversionWorker",
    "Converted",
    "Converter",
    "Format",
    "check_bytes",
    "resolve_format",
]
