"""What a question asks for, held by the answer: a how-to answer quotes the command or code block that
does it, a question about a default leads with the passage stating the value, and the answer's
citations are numbered [1], [2], ... in the order it reads them (issue #39, item 5)."""

from __future__ import annotations

import re

from kbsearch.services.answers.citations import RetrievalLedger
from kbsearch.services.answers.passages import MAX_BLOCK_LINES, _bounded_code
from tests.searchsvc.services.answers.support import answer, hit

FAQ = """## Installing

Argo CD installs into its own namespace, and most teams keep it in the one called argocd.
The installation takes a few minutes on a small cluster, and needs cluster-admin rights.
Installing Argo CD twice into one cluster is not supported.
"""

INSTALL = """## Install Argo CD

Create the namespace first.

```bash
kubectl create namespace argocd
kubectl apply -n argocd -f https://raw.githubusercontent.com/argoproj/argo-cd/stable/manifests/install.yaml
```
"""

INLINE = """## Installing with Helm

Installing with Helm is the other way the installation is supported.
Run `helm install argocd argo/argo-cd --namespace argocd` from a machine with cluster access.
"""

DEFAULTS = """## Reconciliation

Argo CD polls every Git repository of its applications to find new commits.
The polling can be changed in argocd-cm, and webhooks make it unnecessary.

| Key | Default | Meaning |
|---|---|---|
| timeout.reconciliation | 120s | how often Argo CD polls Git |
"""

DEFAULT_SENTENCE = """## Polling

How often Argo CD polls Git for new commits is set by timeout.reconciliation in argocd-cm.
The default is 120s, with a jitter of up to 60s.
"""


async def test_a_how_to_answer_quotes_the_command_from_a_chunk_further_down():
    # The FAQ's sentences share more words with the question; the commands are in the second chunk.
    text, extracts = await answer("how do I install argo cd into the argocd namespace?", FAQ, INSTALL)
    assert "kubectl apply -n argocd -f" in text
    assert len(extracts) <= 3
    # Not a how-to question: no command is added.
    plain, _ = await answer("argo cd installs into its own namespace argocd", FAQ, INSTALL, max_sentences=1)
    assert "kubectl" not in plain


async def test_an_inline_command_line_counts_as_the_command():
    text, _ = await answer("how do I install argo cd, is helm supported?", FAQ, INLINE, max_sentences=2)
    assert "`helm install argocd argo/argo-cd --namespace argocd`" in text


async def test_a_default_answer_leads_with_the_value():
    question = "how often does argo cd poll git for new commits by default?"
    text, _ = await answer(question, DEFAULTS, max_sentences=2)
    assert text.split("\n\n")[0].endswith("[1]:") and "120s" in text.split("\n\n")[1].split("\n")[2]
    text, _ = await answer(question, DEFAULT_SENTENCE, max_sentences=2)
    assert text.startswith("The default is 120s")


def test_the_ledger_renumbers_in_reading_order_and_keeps_every_chunk():
    ledger = RetrievalLedger()
    ledger.add(hit(n, f"chunk {n}") for n in range(1, 6))
    mapping = ledger.renumber([4, 2, 4])
    assert mapping == {4: 1, 2: 2, 1: 3, 3: 4, 5: 5}
    assert [h.content for _, h in ledger.numbered()] == ["chunk 4", "chunk 2", "chunk 1", "chunk 3", "chunk 5"]
    # A chunk found again keeps its new number.
    assert ledger.add([hit(3, "chunk 3")]) == ([4], [])
    assert ledger.renumber([]) == {n: n for n in range(1, 6)}


def test_a_long_code_block_is_cut_at_a_line_and_says_so():
    code = "```bash\n" + "\n".join(f"echo {i}" for i in range(200)) + "\n```"
    cut = _bounded_code(code)
    lines = cut.split("\n")
    assert len(lines) <= MAX_BLOCK_LINES + 3 and lines[-2:] == ["# …", "```"]
    assert _bounded_code("```\necho 1\n```") == "```\necho 1\n```"


def markers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]
