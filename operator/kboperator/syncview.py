"""What `knowledge-sync` shows of a sync: progress while it runs, then the result in words.

stderr is for people: a progress bar (tqdm) when it is a terminal, else one plain progress line
every few seconds (a CI log has no use for a redrawn bar), each skipped and failed file with
its reason, log lines. stdout is for the result: a sentence, the `--json` object, or with
`--json-lines` one JSON object per event (sync.progress) and a last `summary` one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

from kboperator.models import Quality, SyncResult
from kboperator.sync.progress import DocumentDone, Phase, Planned, SyncEvent

QUIET, NORMAL, VERBOSE = 0, 1, 2
PROGRESS_INTERVAL_S = 5.0


class SyncView:
    """The `progress` callback of one sync, and the lines around it."""

    def __init__(
        self,
        *,
        out: TextIO,
        err: TextIO,
        verbosity: int = NORMAL,
        json_lines: bool = False,
        interval_s: float = PROGRESS_INTERVAL_S,
        repo: str = "the repository",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out, self.err = out, err
        self.verbosity = verbosity
        self.json_lines = json_lines
        self.interval_s = interval_s
        self.repo = repo
        self.clock = clock
        self.terminal = err.isatty()
        self._bar: tqdm[Any] | None = None
        self._total = self._done = 0
        self._started = self._last_line = 0.0

    def say(self, text: str, *, level: int = NORMAL) -> None:
        """A line for people on stderr, above the bar if one is drawn."""
        if self.verbosity >= level:
            tqdm.write(text, file=self.err)

    def emit(self, record: dict[str, Any]) -> None:
        """One JSON line on stdout (--json-lines)."""
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def __call__(self, event: SyncEvent) -> None:
        if self.json_lines:
            self.emit(event.to_json())
        if isinstance(event, Phase):
            what = "fetching" if event.phase == "fetching" else "reading the files of"
            self.say(f"knowledge-sync: {what} {self.repo}")
        elif isinstance(event, Planned):
            self._planned(event)
        elif event.action != "read":
            self._document(event)

    def _planned(self, plan: Planned) -> None:
        self._total, self._done = plan.total, 0
        self._started = self._last_line = self.clock()
        kind = "full reconcile" if plan.full else "incremental sync"
        self.say(
            f"knowledge-sync: {kind}: {_count(plan.total, 'document')} to send or delete, {plan.unchanged} unchanged, "
            f"{_count(plan.skipped, 'file')} skipped"
        )
        if self.terminal and self.verbosity >= NORMAL and plan.total:
            self._bar = tqdm(total=plan.total, unit="doc", desc="syncing", file=self.err, dynamic_ncols=True)

    def _document(self, done: DocumentDone) -> None:
        self._done += 1
        self.say(f"  {done.outcome}: {done.path}", level=VERBOSE)
        if self._bar is not None:
            self._bar.update()
            if self._done >= self._total:
                self.close()
            return
        now = self.clock()
        if self._done >= self._total or now - self._last_line >= self.interval_s:
            self._last_line = now
            self.say(f"knowledge-sync: {self._progress_line(now)}")

    def _progress_line(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        rate = self._done / elapsed
        line = f"{self._done}/{self._total} documents ({100 * self._done // max(self._total, 1)}%), {rate:.1f}/s"
        if self._done < self._total:
            line += f", about {tqdm.format_interval((self._total - self._done) / rate)} left"
        else:
            line += f", in {tqdm.format_interval(elapsed)}"
        return line

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def result(self, result: SyncResult, *, as_json: bool, table: bool = False) -> None:
        """Every skipped and failed file on stderr, then the result on stdout; `table`: each judged
        question's line too (`--eval`), else the figures alone."""
        self.close()
        for issue in result.skipped:
            tqdm.write(f"skipped: {issue.path}: {issue.reason}", file=self.err)
        for issue in result.failed:
            tqdm.write(f"failed: {issue.path}: {issue.reason}", file=self.err)
        if self.json_lines:
            self.emit({"event": "summary", **result.to_json()})
        elif as_json:
            self.out.write(json.dumps(result.to_json()) + "\n")
        else:
            self.out.write(summary(result) + "\n")
            if result.quality is not None:
                self.out.write((quality_table(result.quality) if table else quality_line(result.quality)) + "\n")

    def error(self, record: dict[str, Any], *, as_json: bool) -> None:
        self.close()
        if self.json_lines:
            self.emit({"event": "error", **record})
        elif as_json:
            self.out.write(json.dumps(record) + "\n")


class LogHandler(logging.StreamHandler[TextIO]):
    """Log lines on the stream, above the progress bar (tqdm redraws it below)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


def summary(result: SyncResult) -> str:
    """The result in words, e.g. `converged at 1a2b3c4d5e6f (full reconcile): 3 added, ...`."""
    state = "converged" if result.ok else "partial"
    if not result.fetched:
        return (
            f"{state} at {result.commit[:12]}: nothing to do, the ref is still at the last synced commit; "
            f"the source holds {_count(result.documents, 'document')}"
        )
    kind = "full reconcile" if result.full else "incremental sync"
    counts = ", ".join(
        f"{number} {word}"
        for number, word in (
            (result.added, "added"),
            (result.modified, "modified"),
            (result.deleted, "deleted"),
            (result.renamed, "renamed"),
            (result.unchanged, "unchanged"),
            (len(result.skipped), "skipped"),
            (len(result.failed), "failed"),
        )
    )
    return (
        f"{state} at {result.commit[:12]} ({kind}, {result.duration_s:.1f} s): {counts}; "
        f"the source holds {_count(result.documents, 'document')}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def quality_line(quality: Quality) -> str:
    """The judged questions' figures in words, e.g. `quality: 20 questions, hit@1 0.65, hit@5 0.9, ...`."""
    if quality.error is not None:
        return f"quality: no figures: {quality.error}"
    if not quality.questions:
        return "quality: .kb/questions.yaml holds no questions"
    facts = (
        f", answers with their facts {_figure(quality.facts_share)} of {quality.with_facts}"
        if quality.with_facts
        else ""
    )
    return (
        f"quality: {_count(quality.questions, 'question')}, hit@1 {_figure(quality.hit_at_1)}, "
        f"hit@5 {_figure(quality.hit_at_5)}{facts}; {len(quality.failed)} failed"
    )


def quality_table(quality: Quality) -> str:
    """One line per judged question (its rank among the top 5, its facts held), then the figures."""
    lines = [f"{'hit@1':>5}  {'hit@5':>5}  {'facts':>5}  question"]
    for o in quality.outcomes:
        facts = f"{len(o.facts) - len(o.missing_facts)}/{len(o.facts)}" if o.facts else "-"
        question = " ".join(o.question.split())
        lines.append(f"{_yes(o.hit_at_1):>5}  {_yes(o.hit_at_5):>5}  {facts:>5}  {question}")
        if o.missing_facts:
            lines.append(f"{'':>20}missing: {', '.join(repr(f) for f in o.missing_facts)}")
        if not o.hit_at_5:
            lines.append(f"{'':>20}expected: {', '.join(o.expected)}")
    return "\n".join([*lines, quality_line(quality)]) if quality.outcomes else quality_line(quality)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
