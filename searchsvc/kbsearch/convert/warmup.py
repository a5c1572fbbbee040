"""Imported once by the conversion forkserver: everything a parser would read from disk, read now.

A conversion child may open no file (sandbox.py), yet parsers import modules lazily on first use
(docutils' directives, pdfminer's font metrics, a codec named by a file) and nbformat reads a schema
file. So the forkserver, before it forks any child, imports every module of the parser libraries
and converts one small document of each text format and notebook version; the children inherit
all of it. Importing this module does that work: it is in the worker's forkserver preload list and
nowhere else.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import warnings
from collections.abc import Callable
from functools import partial

from kbsearch.convert.formats import CONVERTERS

__all__ = ["warm"]

# Every module of these is imported (optional extras that are not installed are skipped).
_PACKAGES = (
    "encodings",
    "xml",  # mammoth's docx reader reaches xml.dom.expatbuilder lazily
    "docutils.languages",
    "docutils.parsers.rst",
    "docutils.transforms",
    "docutils.utils",
    "docutils.readers",
    "docutils.writers.html5_polyglot",
    "docutils.writers.null",
    "pdfminer",
    "mammoth",
    "nbformat",
    "bs4",
    "markdownify",
    "soupsieve",
)
_SKIPPED = (".tests", ".test", ".__main__", ".cli", ".main")

_RST = """Title
=====

.. contents::

Section
-------

Text *em* **strong** ``code`` a link_, :ref:`label <x>`, :math:`a^2` and a note [#]_ |u|.

.. _link: https://example.org
.. [#] The footnote.
.. |u| unicode:: U+00A9
.. |d| date::

.. note:: A note.

.. admonition:: Custom

   Body.

.. code:: python

   x = 1

.. math::

   x^2

.. table:: Caption

   ===  ===
   a    b
   ===  ===
   1    2
   ===  ===

.. list-table::
   :header-rows: 1

   * - a
   * - 1

.. csv-table:: T

   1, 2

.. topic:: Topic

   Body.

.. sidebar:: Side

   Body.

.. rubric:: Rubric

.. epigraph::

   Quote.

.. container:: c

   Contained.

.. line-block::

   line

.. parsed-literal::

   *literal*

.. image:: picture.png
   :alt: picture

.. figure:: picture.png

   Caption.

.. meta::
   :description: d

.. role:: custom

:custom:`text`

.. sectnum::
.. header:: head
.. target-notes::

term
   definition

:field: value

-a  option
"""
_TEXTS = {
    "rst": _RST,
    "html": "<html><head><title>T</title></head><body><main><h1>T</h1><p>a <img alt=x src=y></p>"
    "<table><tr><th>a</th></tr><tr><td>1</td></tr></table><pre><code class=language-py>x</code></pre>"
    "</main></body></html>",
    "mdx": "import X from 'y'\n\n# T\n\n<Tabs>\n  <Tab>text {x}</Tab>\n</Tabs>\n",
    "adoc": "= T\n\n== S\n\n[source,py]\n----\nx\n----\n\n|===\n|a|b\n|1|2\n|===\n",
}
# One notebook of each major version nbformat upgrades from (each upgrade validates with its schema).
_NOTEBOOKS = (
    {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []},
    {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {},
        "worksheets": [{"cells": [{"cell_type": "markdown", "source": "x", "metadata": {}}], "metadata": {}}],
    },
    {"nbformat": 2, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]},
)


def _attempt(action: Callable[[], object]) -> None:
    # An optional extra not installed, a codec of another platform, a sample a parser version
    # reads otherwise: the child would fail on that feature alone, and the forkserver must start.
    try:
        action()
    except Exception:  # noqa: BLE001
        return


def _import_tree(package: str) -> None:
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + ".", onerror=lambda name: None):
        if not any(part in info.name for part in _SKIPPED):
            _attempt(partial(importlib.import_module, info.name))


def warm() -> None:
    for package in _PACKAGES:
        _attempt(partial(_import_tree, package))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, text in _TEXTS.items():
            _attempt(partial(CONVERTERS[fmt].convert, text.encode()))
        for notebook in _NOTEBOOKS:
            _attempt(partial(CONVERTERS["ipynb"].convert, json.dumps(notebook).encode()))


warm()
