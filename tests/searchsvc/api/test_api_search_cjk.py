"""A Chinese, a Japanese and a Korean question find their page by keyword through the HTTP API, on both stores
(pages from the judged multilingual set, tests/fixtures/multilingual, bench.multilingual)."""

from __future__ import annotations

import pytest

from tests.searchsvc.api_fixtures import put
from tests.support.paths import REPO_ROOT

PAGES = REPO_ROOT / "tests" / "fixtures" / "multilingual" / "pages"
NAMES = (
    "zh-pvc.md",
    "zh-quota.md",
    "zh-rollback.md",
    "ja-secret.md",
    "ja-cronjob.md",
    "ja-probes.md",
    "ko-secret.md",
    "ko-logs.md",
    "code-backup-ko.md",
    "en-etcd-backup.md",
)


@pytest.fixture
async def loaded(api):
    for name in NAMES:
        await put(api, f"https://git.example/ml/blob/main/{name}", (PAGES / name).read_text(), sourceIdentifier="ml")
    return api


@pytest.mark.parametrize(
    ("query", "page"),
    [
        ("限制命名空间的资源总量", "zh-quota.md"),
        ("機密情報を保存する方法", "ja-secret.md"),
        ("이전에 종료된 컨테이너의 로그를 보려면", "ko-logs.md"),
        ("오래된 스냅샷 삭제", "code-backup-ko.md"),
    ],
    ids=["chinese", "japanese", "korean", "korean-code-comments"],
)
async def test_a_cjk_question_finds_its_page_by_keyword(loaded, query, page):
    response = await loaded.post("/api/v1/search", json={"query": query, "mode": "keyword", "limit": 3})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results and results[0]["uri"].endswith(page)
