"""Teams a and b, their tokens and documents, for the scoped-access tests of every face."""

from __future__ import annotations

import hashlib

ADMIN, TEAM_A, A_WRITER, NOBODY, HASHED = (
    "admin-tok-1",
    "team-a-tok-2",
    "a-writer-tok-3",
    "nobody-tok-4",
    "hashed-tok-5",
)
B_WORD = "zebrafish"  # only in team b's documents
A_DOCS = {f"https://git.example/a/doc{i}.md": "team-a/docs" for i in range(3)}
B_DOCS = {f"https://git.example/b/doc{i}.md": "team-b/docs" for i in range(4)}
ORPHAN = "https://git.example/orphan.md"


def tokens_yaml(*entries: str) -> str:
    return "tokens:\n" + "".join(entries)


def entry(name: str, token: str, sources: str, write: bool = False) -> str:
    return f'  - name: {name}\n    token: "{token}"\n    write: {str(write).lower()}\n    sources: {sources}\n'


TOKENS = tokens_yaml(
    entry("admin", ADMIN, '["*"]', write=True),
    entry("team-a-agent", TEAM_A, '["team-a/*"]'),
    entry("team-a-writer", A_WRITER, '["team-a/*"]', write=True),
    entry("nobody", NOBODY, "[]"),
    f'  - name: hashed\n    sha256: "{hashlib.sha256(HASHED.encode()).hexdigest()}"\n    sources: ["team-a/docs"]\n',
)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def content(uri: str, source: str) -> str:
    extra = f" The {B_WORD} team keeps its secrets here." if source.startswith("team-b") else ""
    sections = [
        f"## Part {j}\n\n" + " ".join(f"shared words about deploys part{j} line{k}." for k in range(14))
        for j in range(2)
    ]
    return f"# {uri}\n\n{extra}\n\n" + "\n\n".join(sections) + extra


def assert_no_b(text: str) -> None:
    for leak in ("team-b", "/b/", B_WORD, "orphan"):
        assert leak not in text, f"{leak!r} leaked: {text[:500]}"
