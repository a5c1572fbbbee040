"""Markdown chunking: front matter, blocks, heading paths, chunks that keep their meaning, and their embedding text.

markdown.py is the facade (MarkdownChunker); frontmatter.py parses the leading block, blocks.py
finds the top-level markdown blocks, embedtext.py builds the text each chunk is embedded as.
"""

from kbsearch.chunker.markdown import ALGORITHM_VERSION, MarkdownChunker

__all__ = ["ALGORITHM_VERSION", "MarkdownChunker"]
