"""Markdown chunking: front matter, heading paths, splitter-sized chunks and their embedding text.

markdown.py is the facade (MarkdownChunker); frontmatter.py parses the leading block, outline.py
finds headings and cut points, embedtext.py builds the text each chunk is embedded as.
"""

from kbsearch.chunker.markdown import ALGORITHM_VERSION, MarkdownChunker

__all__ = ["ALGORITHM_VERSION", "MarkdownChunker"]
