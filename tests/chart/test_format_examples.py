"""The chart's example sources for Sphinx and Docusaurus sites: valid, and selecting the files they claim."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml

from kboperator.sync.paths import PathFilter
from tests.chart.support import crd_schema

EXAMPLE = Path(__file__).parents[2] / "charts" / "knowledge-base" / "examples" / "sphinx-and-docusaurus-sources.yaml"


def test_the_format_examples_are_valid_sources_that_select_each_sites_files() -> None:
    sources = {doc["metadata"]["name"]: doc["spec"] for doc in yaml.safe_load_all(EXAMPLE.read_text())}
    for name, spec in sources.items():
        source = {"apiVersion": "kb.knowledgebase.dev/v1alpha1", "kind": "KnowledgeSource", "spec": spec}
        jsonschema.validate(source | {"metadata": {"name": name, "namespace": "knowledge"}}, crd_schema())
    sphinx = PathFilter(sources["sphinx-docs"]["paths"], sources["sphinx-docs"]["exclude"])
    assert sphinx.matches("docs/guide/install.rst") and sphinx.matches("docs/tutorial.ipynb")
    assert not sphinx.matches("docs/_build/html/install.rst") and not sphinx.matches("setup.py")
    site = PathFilter(sources["docusaurus-site"]["paths"], sources["docusaurus-site"]["exclude"])
    for path in ("docs/intro.mdx", "blog/2024-01-01-launch.md", "static/runbook.pdf", "records/adr-7.docx"):
        assert site.matches(path), path
    assert not site.matches("docs/node_modules/x/readme.md") and not site.matches("src/pages/index.js")
