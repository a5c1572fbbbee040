"""Each format's converter on real files: structure kept as markdown, anchors placed, bad files refused."""

from __future__ import annotations

import json

import pytest

from kbsearch.chunker import MarkdownChunker
from kbsearch.convert import ConversionError, check_bytes, resolve_format
from kbsearch.convert.formats import CONVERTERS
from tests.support.formatfiles import (
    code_cell,
    docx_file,
    encrypted_pdf,
    markdown_cell,
    notebook,
    owner_only_pdf,
    pdf_pages,
    scanned_pdf,
    stream_output,
    zip_bomb_docx,
)


def convert(fmt: str, data: bytes | str):
    return CONVERTERS[fmt].convert(data.encode("utf-8") if isinstance(data, str) else data)


def refused(fmt: str, data: bytes | str) -> ConversionError:
    with pytest.raises(ConversionError) as caught:
        convert(fmt, data)
    return caught.value


# --- text formats -------------------------------------------------------------------------------

MDX = """---
title: Sync waves
tags: [argo]
---
import Tabs from '@theme/Tabs';
import TabItem from '@theme/TabItem';
export const toc = [
  {value: 'x'},
];

# Sync waves {#waves}

<Tabs groupId="os">
  <TabItem value="cli" label="CLI">
    Annotate the resource with **argocd.argoproj.io/sync-wave**.

    ```yaml
    metadata:
      annotations:
        argocd.argoproj.io/sync-wave: "5"
    ```
  </TabItem>
</Tabs>

{/* reviewers: keep this short */}
<Admonition type="tip" title={`Tip`} onClick={() => go(a > b)}>
Waves run in order, lowest first.
</Admonition>

Inline `<Tabs>` in code stays, and so does `{value}`.
"""


def test_mdx_keeps_text_and_code_and_leaves_out_imports_exports_jsx_and_expressions():
    text = convert("mdx", MDX).text
    assert text.startswith("---\ntitle: Sync waves\n")  # front matter stays for title and tags
    assert "import " not in text and "export const" not in text and "{value: 'x'}" not in text
    assert "<Tabs" not in text.replace("`<Tabs>`", "") and "</TabItem>" not in text and "Admonition" not in text
    assert "reviewers" not in text and "{#waves}" not in text
    assert "Annotate the resource with **argocd.argoproj.io/sync-wave**." in text
    assert "Waves run in order, lowest first." in text
    assert "Inline `<Tabs>` in code stays, and so does `{value}`." in text
    # Markdown indented inside components is dedented: a paragraph, and a fence that still fences.
    assert "\nAnnotate the resource" in text
    assert '```yaml\nmetadata:\n  annotations:\n    argocd.argoproj.io/sync-wave: "5"\n```' in text
    parsed = MarkdownChunker(100, 400).chunk(text)
    assert parsed.title == "Sync waves" and parsed.tags == ["argo"]


RST = """Application health
==================

Argo CD reports :ref:`health <health-checks>` for every resource, see :doc:`/operator-manual/health`.

.. note:: A **Degraded** application needs attention.

.. toctree::
   :maxdepth: 2

   hidden-page

Custom checks
-------------

1. Write a Lua script.
2. Add it to ``argocd-cm``.

.. code-block:: lua

   hs = {}
   hs.status = "Healthy"
   return hs

.. versionadded:: 2.4
   Checks for CRDs.

.. unknown-directive:: whatever

   its body

=========  ========
Status     Meaning
=========  ========
Healthy    all good
Degraded   failed
=========  ========

.. include:: /etc/passwd
"""


def test_rst_becomes_headings_lists_code_tables_with_sphinx_roles_read_as_text():
    text = convert("rst", RST).text
    assert text.startswith("# Application health\n")
    assert "\n## Custom checks\n" in text
    assert "reports health for every resource, see /operator-manual/health." in text
    assert "1. Write a Lua script.\n2. Add it to `argocd-cm`." in text  # inline literals stay code
    assert '```lua\nhs = {}\nhs.status = "Healthy"\nreturn hs\n```' in text
    assert "| Status | Meaning |" in text and "| Degraded | failed |" in text
    assert "Checks for CRDs." in text and "A **Degraded** application needs attention." in text
    assert "hidden-page" not in text  # the toctree is navigation
    assert "root:" not in text and "passwd" not in text  # includes are off: no file of the server is read


def test_rst_images_and_figures_are_their_alt_text_caption_and_legend():
    text = convert(
        "rst",
        "Pictures\n========\n\n"
        ".. image:: /srv/logo.svg\n   :alt: The project logo\n   :loading: embed\n\n"
        ".. figure:: diagram.png\n   :alt: Architecture diagram\n   :scale: 50\n\n"
        "   The controller and its caches.\n\n   Arrows are API calls.\n\n"
        "Press |stop| to halt.\n\n.. |stop| image:: stop.png\n   :alt: the stop button\n\n"
        ".. image:: unnamed.png\n",
    ).text
    assert text == (
        "# Pictures\n\nThe project logo\n\nArchitecture diagram\n\nThe controller and its caches.\n\n"
        "Arrows are API calls.\n\nPress the stop button to halt.\n"
    )


def test_rst_directive_options_are_options_not_text():
    text = convert("rst", ".. tab-item:: Linux\n   :sync: linux\n\n   Install the package.\n").text
    assert text == "Linux\n\nInstall the package.\n"


def test_rst_include_raw_and_file_tables_are_dropped_and_inline_tables_kept():
    text = convert(
        "rst",
        "T\n=\n\n.. include:: /etc/hostname\n\n.. raw:: html\n\n   <b>raw</b>\n\n"
        ".. csv-table:: From a file\n   :file: /etc/hostname\n\n"
        ".. csv-table:: Inline\n   :header: a, b\n\n   1, 2\n\n"
        ".. role:: html(raw)\n   :format: html\n\nSee :html:`<b>bold</b>` here.\n",
    ).text
    assert "raw" not in text and "From a file" not in text and "<b>" not in text
    assert "| a | b |" in text and "| 1 | 2 |" in text


ADOC = """= Declarative Setup
:toc: left
:product: Argo CD

// a comment nobody should index
{product} applications can be defined declaratively.
See https://argo-cd.readthedocs.io[the docs] and <<repos,Repositories>>.

[[repos]]
== Repositories

.Steps to add one
. Create a secret.
. Label it.
** with the type label

[source,yaml]
----
apiVersion: v1
kind: Secret
----

NOTE: Credentials are never logged.

[cols="1,2"]
|===
|Field |Meaning

|url
|The repository URL
|===

include::partial.adoc[]

Project:: a group of applications
"""


def test_asciidoc_without_a_document_title_takes_its_top_sections_as_the_top_level():
    text = convert("adoc", "== Sync Options\n\nIntro.\n\n=== No Prune\n\nText.\n").text
    assert text == "# Sync Options\n\nIntro.\n\n## No Prune\n\nText.\n"
    assert MarkdownChunker(100, 400).chunk(text).title == "Sync Options"


def test_asciidoc_becomes_markdown_with_attributes_links_lists_code_and_tables():
    text = convert("adoc", ADOC).text
    assert text.startswith("# Declarative Setup\n")
    assert "Argo CD applications can be defined declaratively.\nSee" in text
    assert "[the docs](https://argo-cd.readthedocs.io)" in text and "and Repositories." in text
    assert "\n## Repositories\n" in text
    assert "1. Create a secret.\n1. Label it.\n  - with the type label" in text
    assert "```yaml\napiVersion: v1\nkind: Secret\n```" in text
    assert "**Note:** Credentials are never logged." in text
    assert "| Field | Meaning |\n|---|---|\n| url | The repository URL |" in text
    assert "- **Project**: a group of applications" in text
    assert "comment nobody" not in text and "include::" not in text and ":toc:" not in text


HTML = """<!doctype html><html><head><title>Projects - Argo CD</title><style>p{}</style></head><body>
<header class="md-header"><nav>Argo CD Home Docs Blog</nav></header>
<div class="md-sidebar" role="navigation"><ul><li><a href="/a">Getting started</a></li></ul></div>
<main><article>
<h1 id="projects">Projects<a class="headerlink" href="#projects">¶</a></h1>
<p>Projects group <em>applications</em>; a project_name is unique.</p>
<ul><li>source repositories</li><li>destination clusters</li></ul>
<pre><code class="language-bash">argocd proj create myproj
</code></pre>
<table><thead><tr><th>Role</th><th>Rights</th></tr></thead><tbody><tr><td>admin</td><td>all</td></tr></tbody></table>
<img src="data:image/png;base64,AAAA" alt="Project diagram">
<script>track()</script>
</article></main>
<footer>Copyright The Argo Authors</footer></body></html>"""


def test_html_keeps_the_main_content_not_navigation_scripts_or_images_bytes():
    text = convert("html", HTML).text
    assert text.startswith("# Projects\n")
    assert "Projects group *applications*; a project_name is unique." in text  # no \\_ escapes
    assert "- source repositories\n- destination clusters" in text
    assert "```bash\nargocd proj create myproj\n```" in text
    assert "| Role | Rights |\n| --- | --- |\n| admin | all |" in text
    assert "Project diagram" in text and "base64" not in text
    for chrome in ("Blog", "Getting started", "Copyright", "track()", "¶", "p{}"):
        assert chrome not in text


def test_html_embedded_and_linked_resources_leave_no_url_or_fallback_text():
    text = convert(
        "html",
        '<head><link rel="stylesheet" href="/etc/site.css"><meta http-equiv="refresh" content="0;url=file:///x">'
        '<base href="file:///"></head><body><h1>Page</h1><p>Before <img src="file:///etc/passwd" alt="Logo"></p>'
        '<iframe src="file:///etc/passwd">frame text</iframe><object data="/etc/passwd">object text</object>'
        '<embed src="/etc/passwd"><video src="/v.mp4">video text</video><audio src="/a.mp3">audio text</audio>'
        "<p>After.</p></body>",
    ).text
    assert text == "# Page\n\nBefore Logo\n\nAfter.\n"


def test_html_code_languages_come_from_pandoc_sphinx_and_highlightjs_classes():
    pandoc = '<div class="sourceCode"><pre class="sourceCode yaml"><code class="sourceCode yaml">a: 1</code></pre>'
    sphinx = '<div class="highlight-python notranslate"><div class="highlight"><pre>x = 1</pre></div></div>'
    assert convert("html", pandoc).text == "```yaml\na: 1\n```\n"
    assert convert("html", f'<pre class="language-go"><code>{"package main"}</code></pre>').text.startswith("```go\n")
    assert convert("html", sphinx).text == "```\nx = 1\n```\n"


def test_html_without_a_main_element_drops_page_chrome_and_uses_the_title():
    page = "<html><head><title>Runbook</title></head><body><nav>Menu</nav><p>Restart the pod.</p></body></html>"
    assert convert("html", page).text == "# Runbook\n\nRestart the pod.\n"


def test_plain_text_and_markdown_are_not_converted_at_all():
    assert resolve_format(None, "notes/a.txt").converter is None
    assert resolve_format(None, "https://h/r/blob/main/README").converter is None
    assert resolve_format(None, "docs/x.md").name == "markdown"


# --- notebooks ----------------------------------------------------------------------------------


def test_notebook_cells_become_markdown_and_fences_with_outputs_truncated_and_anchored():
    data = notebook(
        [
            markdown_cell("# Training\n\nWe fit a model."),
            code_cell("model.fit(x)", outputs=[stream_output("stream", name="stdout", text="epoch 1\n" * 50_000)]),
            code_cell(""),  # empty: no anchor, nothing indexed
            markdown_cell("## Results\n\nAccuracy is good."),
        ]
    )
    assert len(data) > 300_000
    converted = convert("ipynb", data)
    text = converted.text
    assert text.startswith("# Training\n\nWe fit a model.\n\n```python\nmodel.fit(x)\n```\n\n```text\nepoch 1\n")
    assert "… (output truncated)" in text and len(text) < 2_000
    assert [a.cell for a in converted.anchors] == [1, 2, 4]
    assert text[converted.anchors[2].offset :].startswith("## Results")
    assert converted.locate(text.index("Accuracy")).cell == 4
    assert converted.locate(text.index("epoch 1")).cell == 2


def test_notebooks_of_older_and_future_format_versions_are_read():
    future = notebook([markdown_cell("# Future\n\nA notebook from a later nbformat.")]).replace(
        b'"nbformat_minor": 5', b'"nbformat_minor": 9'
    )
    assert convert("ipynb", future).text == "# Future\n\nA notebook from a later nbformat.\n"
    v3 = (
        '{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"metadata": {}, "cells": '
        '[{"cell_type": "markdown", "metadata": {}, "source": "# Old\\n\\nA version 3 notebook."}]}]}'
    )
    assert convert("ipynb", v3).text == "# Old\n\nA version 3 notebook.\n"


def test_a_kernel_language_that_is_not_one_word_cannot_end_the_code_fence():
    for language in ("python\n```\n# Injected heading\n", "py`thon", "x" * 40):
        data = notebook([code_cell("print('hi')")])
        data = data.replace(b'"language": "python"', b'"language": ' + json.dumps(language).encode())
        assert convert("ipynb", data).text == "```\nprint('hi')\n```\n", language  # one fence, no info string


def test_a_notebook_that_is_not_json_or_not_a_notebook_is_refused_with_a_code():
    assert refused("ipynb", '{"cells": [').code == "CORRUPT_DOCUMENT"
    assert refused("ipynb", '{"hello": "world"}').code == "CORRUPT_DOCUMENT"


# --- PDF ----------------------------------------------------------------------------------------


def test_pdf_text_is_extracted_page_by_page_with_page_anchors():
    data = pdf_pages(
        "Disaster recovery starts with a backup of the argocd namespace.",
        "Restoring: apply the exported manifests with kubectl.",
        "Verification: every application reports Healthy and Synced.",
    )
    converted = convert("pdf", data)
    assert [a.page for a in converted.anchors] == [1, 2, 3]
    text = converted.text
    assert converted.locate(text.index("Restoring")).page == 2
    assert converted.locate(text.index("Verification")).page == 3
    assert converted.locate(text.index("Disaster")).page == 1


def test_pdf_encrypted_with_a_password_is_refused_but_owner_only_protection_opens():
    assert refused("pdf", encrypted_pdf("a secret plan for the rollout")).code == "ENCRYPTED_DOCUMENT"
    assert "open to every reader" in convert("pdf", owner_only_pdf("a plan open to every reader of it")).text


def test_scanned_pdf_without_a_text_layer_is_refused():
    error = refused("pdf", scanned_pdf(pages=2))
    assert error.code == "NO_TEXT_LAYER" and "2 page(s)" in error.message


def test_corrupt_and_truncated_pdfs_are_refused_with_a_code():
    whole = pdf_pages("Some text that is long enough to count as a text layer.")
    assert refused("pdf", whole[: len(whole) // 3]).code == "CORRUPT_DOCUMENT"
    assert refused("pdf", b"%PDF-1.7\n" + b"\x00garbage" * 100).code == "CORRUPT_DOCUMENT"


# --- Word ---------------------------------------------------------------------------------------


def _runbook(document):
    document.add_heading("Upgrade runbook", level=1)
    document.add_paragraph("Read the release notes first.")
    document.add_heading("Steps", level=2)
    document.add_paragraph("Scale down the controller", style="List Number")
    document.add_paragraph("Apply the new manifests", style="List Number")
    table = document.add_table(rows=2, cols=2)
    for (row, col), value in {(0, 0): "Version", (0, 1): "Notes", (1, 0): "2.9", (1, 1): "needs Redis 7"}.items():
        table.cell(row, col).text = value


def test_docx_headings_come_from_styles_with_lists_and_tables():
    text = convert("docx", docx_file(_runbook)).text
    assert text.startswith("# Upgrade runbook\n\nRead the release notes first.\n\n## Steps\n")
    assert "1. Scale down the controller\n2. Apply the new manifests" in text
    assert "| Version | Notes |\n| --- | --- |\n| 2.9 | needs Redis 7 |" in text


def test_docx_zip_bomb_is_refused_from_its_directory_before_inflating():
    bomb = zip_bomb_docx()
    assert len(bomb) < 2 * 1_048_576
    error = refused("docx", bomb)
    assert error.code == "ARCHIVE_BOMB" and "zip bomb" in error.message


def test_a_zip_that_is_not_a_word_document_and_a_truncated_docx_are_refused():
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("hello.txt", "hi")
    assert refused("docx", out.getvalue()).code == "CONTENT_TYPE_MISMATCH"
    whole = docx_file(_runbook)
    assert refused("docx", whole[: len(whole) // 2]).code == "CORRUPT_DOCUMENT"


# --- types and encodings ------------------------------------------------------------------------


def test_a_file_claiming_one_type_and_being_another_is_refused_before_parsing():
    pdf = pdf_pages("A real PDF with a text layer.")
    word = docx_file(_runbook)
    cases = [("docx", pdf, "pdf"), ("pdf", word, "docx"), ("pdf", b"# just markdown\n", "unknown"), ("rst", pdf, "pdf")]
    for claimed, data, found in cases:
        with pytest.raises(ConversionError) as caught:
            check_bytes(resolve_format(claimed, "x"), data)
        assert caught.value.code == "CONTENT_TYPE_MISMATCH"
        assert caught.value.details == {"claimed": claimed, "found": found}
    check_bytes(resolve_format("pdf", "x"), pdf)
    check_bytes(resolve_format(None, "a.docx"), word)
    check_bytes(resolve_format(None, "a.md"), b"# %PDF- explained\n")


def test_invalid_utf8_in_a_text_format_names_the_offset():
    error = refused("rst", b"Title\n=====\n\ncaf\xe9 au lait\n")
    assert error.code == "INVALID_UTF8" and error.details == {"offset": 16}


def test_content_types_resolve_from_media_types_names_and_extensions():
    assert resolve_format("application/pdf", "x.md").name == "pdf"
    assert resolve_format("text/x-rst; charset=utf-8", "x").name == "rst"
    assert resolve_format("ipynb", "x").name == "ipynb"
    assert resolve_format(None, "https://git.example/r/blob/main/docs/Guide.DOCX?raw=1").name == "docx"
    with pytest.raises(ConversionError) as caught:
        resolve_format("application/x-msdownload", "x.exe")
    assert caught.value.code == "UNSUPPORTED_CONTENT_TYPE"
