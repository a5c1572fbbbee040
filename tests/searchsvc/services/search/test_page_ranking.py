"""Page-level ranking through the HTTP API: path roles and rankWeight, the title lane, on both stores."""

from __future__ import annotations

import pytest

from tests.searchsvc.api_fixtures import put
from tests.support.service import STORE_KINDS, running_service

REPO = "https://git.example/acme/tool/blob/main/"
SOURCE = "acme/tool"
# The reference page documents retries; the blog post announcing them says the same with more of
# the question's words, so on chunk scores alone the post ranks first.
REFERENCE = ("docs/features/retries.md", "# Retries\n\nA failed sync is retried with backoff up to five times.\n")
BLOG = (
    "content/blog/2024/retries-are-here.md",
    "# Retries are here\n\nGood news: a failed sync is now retried, with backoff, up to five times, "
    "so a failed sync retried with backoff recovers.\n",
)
CHANGELOG = ("CHANGELOG.md", "# Changelog\n\n## 2.10\n\n- A failed sync is retried, with backoff, up to five times.\n")
QUESTION = "is a failed sync retried with backoff"


async def load(client, *pages: tuple[str, str], **metadata: object) -> None:
    for path, text in pages:
        await put(client, REPO + path, text, sourceIdentifier=SOURCE, path=path, **metadata)


async def paths(client, query: str, **body: object) -> list[str]:
    response = await client.post("/api/v1/search", json={"query": query, "limit": 5, **body})
    assert response.status_code == 200, response.text
    return [r["metadata"]["path"] for r in response.json()["results"]]


@pytest.fixture(params=STORE_KINDS)
async def weighted(request, tmp_path):
    async with running_service(request.param, tmp_path / "data") as client:
        await load(client, REFERENCE, BLOG, CHANGELOG)
        yield client


async def test_without_default_weights_the_announcement_outranks_the_reference(tmp_path):
    # The ground the other tests stand on: the post's chunk scores are higher.
    async with running_service("edge", tmp_path / "data", default_path_weights=False) as client:
        await load(client, REFERENCE, BLOG)
        assert (await paths(client, QUESTION))[0] == BLOG[0]


async def test_blog_posts_and_changelogs_rank_below_the_page_they_repeat(weighted):
    assert (await paths(weighted, QUESTION))[0] == REFERENCE[0]
    assert set(await paths(weighted, QUESTION)) == {REFERENCE[0], BLOG[0], CHANGELOG[0]}  # still found


@pytest.mark.parametrize(
    ("query", "first"),
    [
        (f"what did the blog post say: {QUESTION}", BLOG[0]),
        (f"the announcement of retries: {QUESTION}", BLOG[0]),
        (f"since 2.10, {QUESTION}", CHANGELOG[0]),  # a version number asks for the release notes
    ],
)
async def test_a_question_that_names_the_blog_or_the_release_still_finds_it(weighted, query, first):
    assert (await paths(weighted, query))[0] == first


async def test_a_sources_rank_weight_wins_over_the_defaults(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await load(client, REFERENCE)
        await load(client, BLOG, rankWeight=1.0)  # this source says its blog is as good as its docs
        assert (await paths(client, QUESTION))[0] == BLOG[0]
        await load(client, BLOG, rankWeight=0.5)
        await load(client, REFERENCE, rankWeight=0.2)  # and a weight below the default's applies too
        assert (await paths(client, QUESTION))[0] == BLOG[0]


async def test_the_title_lane_puts_the_page_the_question_names_first(tmp_path):
    # Two sibling pages with the same body: only their titles tell them apart.
    body = "Configure the client with an endpoint, a token and a timeout; it retries idempotent calls."
    siblings = [
        ("docs/clients/python.md", f"# Python client\n\n{body}\n\nInstall it with pip.\n"),
        ("docs/clients/go.md", f"# Go client\n\n{body}\n\nInstall it from the module proxy.\n"),
    ]
    async with running_service("edge", tmp_path / "data") as client:
        await load(client, *siblings)
        assert (await paths(client, "go client endpoint token timeout"))[0] == "docs/clients/go.md"
        assert (await paths(client, "python client endpoint token timeout"))[0] == "docs/clients/python.md"
