"""Extractive answers from real markdown chunks: what a chosen sentence introduces comes with it, how-to
questions get steps, what-is questions definitions, prose loses its markup, and the source's order holds."""

from __future__ import annotations

import re

from kbsearch.chunker.mdblocks import markdown_blocks
from kbsearch.services.answers.citations import RetrievalLedger
from kbsearch.services.answers.extractive import MAX_CANDIDATES, extract
from tests.searchsvc.services.answers.support import answer, hit
from tests.support.hashing import HashingEmbedder

SYNC_OPTIONS = """## Create Namespace

Argo CD can create the namespace an application deploys to when it does not exist yet.
To let it do so, add the **CreateNamespace** sync option to the application:

```yaml
spec:
  syncPolicy:
    syncOptions:
      - CreateNamespace=true   # items[0] stays as written
```

The namespace is then created before the first sync.
"""

DANGLING = """## Namespaces

Argo CD can create the missing namespace of an application with a sync option. Use the following option:
"""

HOWTO = """## Registering a cluster

A cluster secret describes a cluster Argo CD deploys to, with its server address and credentials.
Clusters registered this way show up in the cluster list of the web interface.

1. Create a service account for Argo CD in the target cluster.
2. Add the cluster with `argocd cluster add my-context`.
3. Check that the cluster shows up with `argocd cluster list`.
"""

DEFINITION = """## ApplicationSets

Many teams generate an ApplicationSet per environment and let it template their applications for them.
An ApplicationSet is a controller resource that generates Argo CD applications from a template and generators.
Teams often keep the ApplicationSet in the same repository as their applications.
"""

MARKUP = """## Sync windows

Sync windows are **configurable windows of time** where syncs are _blocked_ or allowed, see the
[sync windows page](../user-guide/sync_windows.md) and ![a diagram](windows.png) for `manualSync: true` details.
"""

ORDERED = """## Health checks

Argo CD checks the health of every resource it deploys after each sync.
Custom health checks for custom resources are written in Lua by the operator.
The health of an application is the worst health of its resources.
"""


async def test_a_sentence_ending_with_a_colon_brings_its_code_block_fenced_and_verbatim():
    question = "how do I add the CreateNamespace sync option to my application?"
    text, extracts = await answer(question, SYNC_OPTIONS, max_sentences=2)
    assert [e.passage.block is not None for e in extracts] == [True, False]
    assert text == (
        "To let it do so, add the CreateNamespace sync option to the application [1]:\n\n"
        "```yaml\nspec:\n  syncPolicy:\n    syncOptions:\n"
        "      - CreateNamespace=true   # items[0] stays as written\n```"
        "\n\nThe namespace is then created before the first sync [1]."
    )


async def test_a_lead_in_whose_content_is_not_in_the_chunk_is_never_chosen():
    text, extracts = await answer("which sync option creates the namespace? use the following option", DANGLING)
    assert text == "Argo CD can create the missing namespace of an application with a sync option [1]."
    assert all(not e.sentence.endswith(":") for e in extracts)


async def test_how_to_questions_get_the_steps():
    question = "how do I add a cluster to argo cd so it shows up in the cluster list?"
    text, extracts = await answer(question, HOWTO, max_sentences=1)
    assert extracts[0].passage.step
    assert text == (
        "Registering a cluster [1]:\n\n"
        "1. Create a service account for Argo CD in the target cluster.\n"
        "2. Add the cluster with `argocd cluster add my-context`.\n"
        "3. Check that the cluster shows up with `argocd cluster list`."
    )
    # Not a how-to question: the same words choose the description.
    described, _ = await answer("a cluster secret describes the cluster list address", HOWTO, max_sentences=1)
    assert described.startswith("A cluster secret describes a cluster Argo CD deploys to")


async def test_what_is_questions_prefer_a_definition():
    text, _ = await answer("what is an ApplicationSet?", DEFINITION, max_sentences=1)
    assert text.startswith("An ApplicationSet is a controller resource that generates Argo CD applications")


async def test_prose_loses_emphasis_and_link_syntax_but_keeps_inline_code():
    text, _ = await answer("what are sync windows?", MARKUP, max_sentences=1)
    assert text == (
        "Sync windows are configurable windows of time where syncs are blocked or allowed, see the "
        "sync windows page and a diagram for `manualSync: true` details [1]."
    )


async def test_sentences_of_one_chunk_keep_the_order_of_the_source():
    # The question is closest to the last sentence, then the first: the answer still reads them in order.
    question = "is the health of an application the worst health of its resources after each sync?"
    text, extracts = await answer(question, ORDERED, max_sentences=2)
    assert [e.passage.order for e in extracts] == sorted(e.passage.order for e in extracts)
    assert extracts[0].score < extracts[1].score  # ranked the other way round
    assert text.index("checks the health of every resource") < text.index("is the worst health")


async def test_chunks_follow_one_another_best_first_each_cited():
    text, extracts = await answer("how do I make argo create the namespace for my app?", ORDERED, SYNC_OPTIONS)
    assert extracts[0].n == 2 and text.startswith("Argo CD can create the namespace")
    assert re.findall(r"\[(\d)\]", text.split("```")[0])[:2] == ["2", "2"]


async def test_the_embedding_work_of_one_answer_is_bounded():
    embedder = HashingEmbedder(dimensions=64)
    ledger = RetrievalLedger()
    long_chunk = " ".join(f"Sentence number {i} talks about syncing applications." for i in range(200))
    ledger.add(hit(n, long_chunk.replace("number", f"n{n}")) for n in range(1, 21))
    extracts = await extract("syncing applications", ledger, embedder, max_sentences=3, min_similarity=-1.0)
    assert len(extracts) == 3
    assert embedder.calls == [MAX_CANDIDATES + 1]  # one batch: the question and the candidates


def test_hostile_markdown_is_read_without_error_and_keeps_its_code_whole():
    huge_code = "```python\n" + "x = [0]\n" * 130_000 + "```\n"  # about 1 MiB
    unterminated = "\nRun this command:\n\n```bash\nkubectl get pods\n"
    table = "| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 10_000
    nested = "".join(f"{'  ' * depth}- level {depth} item text here\n" for depth in range(200))
    blocks = markdown_blocks(huge_code + table + unterminated)
    assert [b.kind for b in blocks] == ["code", "table", "paragraph", "code"]
    assert blocks[0].text == huge_code.rstrip("\n")
    assert len(blocks[1].text.split("\n")) == 10_002
    assert blocks[3].text == "```bash\nkubectl get pods\n```"  # closed where the chunk ends
    # Past the parser's nesting limit the deeper items are flattened into the last item's text: none is lost.
    (listed,) = markdown_blocks(nested)
    assert listed.kind == "list" and 5 < len(listed.items) < 200
    words = " ".join(item.text for item in listed.items)
    assert all(f"level {depth} item" in words for depth in range(200))


async def test_a_chunk_that_begins_inside_a_code_block_does_not_read_the_code_as_prose():
    cut = "      - CreateNamespace=true\n```\n\nThe namespace is then created before the first sync of the app.\n"
    text, _ = await answer("when is the namespace created?", cut)
    assert text == "The namespace is then created before the first sync of the app [1]."


WEBHOOK = """## Payload size

To prevent DDoS attacks with unauthenticated webhook events, it is recommended to limit the payload size.
You can achieve this by configuring the `argocd-cm` ConfigMap with the `webhook.maxPayloadSizeMB` attribute.
The default value is 50MB.
"""


async def test_the_next_sentence_joins_when_it_holds_more_of_what_was_asked():
    text, extracts = await answer("what is the default for webhook.maxPayloadSizeMB?", WEBHOOK, max_sentences=1)
    assert len(extracts) == 1 and extracts[0].more is not None
    assert text == (
        "You can achieve this by configuring the `argocd-cm` ConfigMap with the `webhook.maxPayloadSizeMB` "
        "attribute [1]. The default value is 50MB [1]."
    )
    # The next sentence adds none of the question's words: it stays out.
    alone, _ = await answer("how do I configure webhook.maxPayloadSizeMB in argocd-cm?", WEBHOOK, max_sentences=1)
    assert "50MB" not in alone
