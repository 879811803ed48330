"""How the CLI shows things: tables, hits, snippets and progress. Every value that comes from an index, a user or a
log is printed as plain text (a :class:`rich.text.Text`), never parsed as markup: a title with ``[/]`` or
``[link=…]`` in it is shown as written. And it is printed inert (:func:`inert`): rich passes ESC through, so a
title, an id or a logged query could otherwise clear the screen, recolour it or plant a hidden hyperlink."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from biorank.types import SCORE_PARTS

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from biorank.types import Answer, Facets, Hit

PLAIN_EVERY_S = 5.0
"""How often a progress line is printed when stderr is not a terminal (a pipe, a CI log)."""
HEARTBEAT_S = 1.0
"""How often a piped progress line checks whether it has been quiet for :data:`PLAIN_EVERY_S`."""


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What a terminal acts on instead of showing: C0 controls but tab and newline (ESC starts CSI and OSC
sequences), DEL, C1 controls (U+009B is a one-character CSI), and the bidirectional marks, embeddings,
overrides and isolates, which reorder what follows them on the line."""
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What ``json.dumps(..., ensure_ascii=False)`` leaves raw of :data:`_CONTROL` (it escapes C0 itself)."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(value: object) -> str:
    r"""``value`` as text a terminal only shows: every control character but tab and newline, and every
    bidirectional control, written as its escape (``\x1b``, ``\u202e``), the rest as it is.

    Args:
        value: anything from an index, a user or a log; None is the empty string.

    Returns:
        The text, safe to print.

    Example:
        >>> inert("\x1b]8;;http://x\x07click\x1b]8;;\x07")
        '\\x1b]8;;http://x\\x07click\\x1b]8;;\\x07'
    """
    text = "" if value is None else str(value)
    return _CONTROL.sub(_escaped, text)


def json_text(value: object, **dumps: Any) -> str:
    r"""``value`` as JSON for a terminal: non-ASCII text kept readable, and the controls JSON leaves raw (DEL, C1,
    bidirectional) escaped as ``\uXXXX`` too, which any JSON reader reads back as the same string.

    Example:
        >>> json_text({"title": "a\u202eb"})
        '{"title": "a\\u202eb"}'
    """
    text = json.dumps(value, ensure_ascii=False, **dumps)
    # These characters are never JSON syntax, so every one is inside a string, where \uXXXX means the same.
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def say(message: str) -> None:
    """A line of output (stdout), inert (:func:`inert`): results and statuses quote names and records that come
    from indices, which anyone who can write to the cluster can fill with control sequences."""
    click.echo(inert(message))


def echo(message: str) -> None:
    """A message for the user beside the output: to stderr, so the output stays pipeable; inert (:func:`inert`),
    as messages quote names and notes that come from indices."""
    click.echo(inert(message), err=True)


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def plain(value: object) -> Any:
    """``value`` as text that rich prints literally (no markup) and a terminal only shows (:func:`inert`)."""
    from rich.text import Text

    return Text(inert(value))


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
    """Rank, id, every score part that applies (an ensemble's members as ``rerank 1``, ``rerank 2``… after its
    combined ``rerank``), and the title."""
    parts = [name for name in SCORE_PARTS[1:] if any(getattr(h, name) is not None for h in hits)]
    # The final score gets a column of its own only where it is not one of the parts (the fusions).
    if any(all(h.score != getattr(h, name) for name in parts) for h in hits):
        parts.append("score")
    members = max((len(h.rerank_members or ()) for h in hits), default=0)
    columns = [c for p in parts for c in (p, *(f"rerank {i}" for i in range(1, members + 1) if p == "rerank"))]

    def cell(hit: Hit, column: str) -> str:
        if column.startswith("rerank "):
            values, at = hit.rerank_members or (), int(column.split()[1]) - 1
            return f"{values[at]:.4f}" if at < len(values) else ""
        value = getattr(hit, column)
        return f"{value:.4f}" if value is not None else ""

    rows = [(hit.rank, hit.id, *(cell(hit, c) for c in columns), hit.title) for hit in hits]
    return table(title, ["rank", "id", *columns, "title"], rows, no_wrap=("id",), right=("rank", *columns))


def facets_table(facets: Facets) -> Table:
    """One row per facet value: the facet, the value, and how many of the candidate documents carry it."""
    rows = [(name, value, count) for name, pairs in facets.counts.items() for value, count in pairs]
    return table(f"facets of the first stage's top {facets.candidates} documents", ["facet", "value", "documents"],
                 rows, right=("documents",))


def print_snippets(answer: Answer, per_hit: int = 3) -> None:
    """Each hit's best sentences, the query terms that matched in bold."""
    from rich.text import Text

    out = console()
    for hit in answer.hits:
        best = answer.snippets_of(hit.id, per_hit)
        if not best:
            continue
        out.print(Text(inert(f"#{hit.rank} {hit.id}  {hit.title}"), style="bold", overflow="fold"))
        for s in best:
            out.print(Text(f"  {s.score:.3f}  {s.section} {s.begin}-{s.end}  ", style="dim") +
                      _highlighted(s.text, s.matches))


def _highlighted(text: str, matches: Sequence[tuple[int, int]]) -> Any:
    """``text`` inert with ``matches`` (offsets into the raw text) in bold: each piece is escaped on its own, as
    an escape is longer than the character it stands for and would shift every later offset."""
    from rich.text import Text

    out, done = Text(), 0
    for begin, end in sorted(matches):
        if begin < done:
            continue
        out.append(inert(text[done:begin]))
        out.append(inert(text[begin:end]), style="bold yellow")
        done = end
    out.append(inert(text[done:]))
    return out


def explanation_text(node: dict | None, depth: int = 0) -> str:
    if not node:
        return "(no explanation returned)"
    # A description quotes the query's terms and field names.
    lines = [f"{'  ' * depth}{node.get('value', 0):.4f}  {inert(node.get('description', ''))}"]
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
