"""A small handbook repository carrying judged questions, shared by the sync and CLI tests."""

from __future__ import annotations

from pathlib import Path

from tests.support.git import WorkRepo

QUESTIONS = """\
version: 1
questions:
  - question: How do I install the operator with helm?
    expected: docs/install.md
    facts: ["helm install"]
  - question: How are snapshots of the collection restored?
    expected: [docs/backup.md, docs/restore.md]
  - question: Which flux capacitor setting needs gigawatts?
    expected: docs/flux.md
    facts: ["1.21 gigawatts"]
"""


def handbook(path: Path) -> WorkRepo:
    work = WorkRepo(path)
    work.write(
        "docs/install.md",
        "# Installing the operator\n\nRun helm install kb-operator with the chart. "
        "The operator needs Kubernetes 1.28 or newer.\n",
    )
    work.write(
        "docs/backup.md",
        "# Backups\n\nSnapshots of the collection are taken every night; they are restored with kb restore.\n",
    )
    work.write("docs/tokens.md", "# API tokens\n\nReaders and writers hold bearer tokens kept in a Secret.\n")
    work.write(".kb/questions.yaml", QUESTIONS)
    work.commit()
    return work
