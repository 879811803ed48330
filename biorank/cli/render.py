"""How the CLI shows things: tables, hits, snippets and progress. Every value that comes from an index or a user
is printed as plain text (a :class:`rich.text.Text`), never parsed as markup: a title with ``[/]`` or
``[link=…]`` in it is shown as written."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from biorank.types import Answer, Hit

PLAIN_EVERY_S = 5.0
"""How often a progress line is printed when stderr is not a terminal (a pipe, a CI log)."""
HEARTBEAT_S = 1.0
"""How often a piped progress line checks whether it has been quiet for :data:`PLAIN_EVERY_S`."""


def echo(message: str) -> None:
    """A message for the user beside the output: to stderr, so the output stays pipeable."""
    click.echo(message, err=True)


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def plain(value: object) -> Any:
    """``value`` as text that rich prints literally."""
    from rich.text import Text

    return Text("" if value is None else str(value))


def shorten(value: object, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]], *, header: bool = True,
          no_wrap: Sequence[str] = (), right: Sequence[str] = ()) -> Table:
    from rich.table import Table

    result = Table(title=plain(title) if title else None, title_justify="left", show_header=header)
    for column in columns:
        result.add_column(plain(column), overflow="fold", no_wrap=column in no_wrap,
                          justify="right" if column in right else "left")
    for row in rows:
        result.add_row(*(plain(cell) for cell in row))
    return result


def hits_table(hits: Sequence[Hit], title: str) -> Table:
    """Rank, id, every score part that applies, and the title."""
    parts = [name for name in ("bm25", "dense", "hybrid", "rerank") if any(getattr(h, name) is not None for h in hits)]
    # The final score gets a column of its own only where it is not one of the parts (the fusions).
    if any(all(h.score != getattr(h, name) for name in parts) for h in hits):
        parts.append("score")
    rows = [(hit.rank, hit.id, *(f"{getattr(hit, p):.4f}" if getattr(hit, p) is not None else "" for p in parts),
             hit.title) for hit in hits]
    return table(title, ["rank", "id", *parts, "title"], rows, no_wrap=("id",), right=("rank", *parts))


def print_snippets(answer: Answer, per_hit: int = 3) -> None:
    """Each hit's best sentences, the query terms that matched in bold."""
    from rich.text import Text

    out = console()
    for hit in answer.hits:
        best = answer.snippets_of(hit.id, per_hit)
        if not best:
            continue
        out.print(Text(f"#{hit.rank} {hit.id}  {hit.title}", style="bold", overflow="fold"))
        for s in best:
            sentence = Text(s.text)
            for begin, end in s.matches:
                sentence.stylize("bold yellow", begin, end)
            out.print(Text(f"  {s.score:.3f}  {s.section} {s.begin}-{s.end}  ", style="dim") + sentence)


def explanation_text(node: dict | None, depth: int = 0) -> str:
    if not node:
        return "(no explanation returned)"
    lines = [f"{'  ' * depth}{node.get('value', 0):.4f}  {node.get('description', '')}"]
    lines += [explanation_text(child, depth + 1) for child in node.get("details", [])]
    return "\n".join(lines)


class _PlainProgress:
    """Progress as a line every :data:`PLAIN_EVERY_S` seconds (done/total, rate, time left), for a stderr that is
    not a terminal, where a bar would print nothing useful for as long as the work takes."""

    def __init__(self, what: str, total: int, unit: str) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.done = 0
        self.started = self.said = time.monotonic()
        self._lock = threading.Lock()

    def advance(self, n: int, done: int | None = None) -> None:
        with self._lock:
            self.done = self.done + n if done is None else done
            now = time.monotonic()
            if now - self.said >= PLAIN_EVERY_S or self.done >= self.total:
                self._say(now)

    def say_if_quiet(self) -> None:
        """The line again when none was said for :data:`PLAIN_EVERY_S` and the work is not done."""
        with self._lock:
            now = time.monotonic()
            if now - self.said >= PLAIN_EVERY_S and self.done < self.total:
                self._say(now)

    def _say(self, now: float) -> None:
        self.said = now
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f", {left:.0f} s left" if left != float("inf") and self.done < self.total else ""
        # Slow work (a training step of half a minute) reads better as time per item than as 0.0/s.
        pace = f"{rate:.1f}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.1f} s each"
        echo(f"{self.what}: {self.done}/{self.total} {self.unit}, {pace}{eta}")


@contextlib.contextmanager
def _heartbeat(current: Callable[[], _PlainProgress | None]) -> Iterator[None]:
    """Repeats the ``current`` line while it is quiet: work that advances rarely (the first batch of an index
    with sentences takes a minute on a slow CPU) must not look stalled to a log."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            line = current()
            if line is not None:
                line.say_if_quiet()

    thread = threading.Thread(target=beat, name="biorank-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def record_progress(what: str, total: int, unit: str = "records") -> Iterator[Callable[[int], None]]:
    """Progress on stderr (``unit`` done of ``total``, per second, time left); yields its advance function."""
    if not sys.stderr.isatty():
        line = _PlainProgress(what, total, unit)
        with _heartbeat(lambda: line):
            yield line.advance
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TextColumn(f"{unit} {{task.fields[rate]:.1f}}/s"), TimeRemainingColumn(),
                  console=console(stderr=True)) as bar:
        task = bar.add_task(what, total=total, rate=0.0)

        def advance(records: int) -> None:
            bar.advance(task, records)
            elapsed = bar.tasks[task].elapsed or 0
            bar.update(task, rate=bar.tasks[task].completed / elapsed if elapsed else 0.0)

        yield advance


@contextlib.contextmanager
def stage_progress() -> Iterator[Callable[[str, int, int], None]]:
    """Progress for work in stages: the yielded function takes (stage, done, total), a bar or line per stage."""
    if not sys.stderr.isatty():
        lines: dict[str, _PlainProgress] = {}
        latest: list[_PlainProgress] = []

        def say(stage: str, done: int, total: int) -> None:
            # A stage that starts again (validation after every epoch) counts its rate afresh.
            if stage not in lines or done < lines[stage].done:
                lines[stage] = _PlainProgress(stage, total, "done")
            latest[:] = [lines[stage]]
            lines[stage].advance(0, done)

        with _heartbeat(lambda: latest[0] if latest else None):
            yield say
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console(stderr=True)) as bar:
        tasks: dict[str, Any] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update
