"""What every benchmark shares: its arguments, the data it reads, the connection, the timing loop, and the record.

A benchmark's result is data: :func:`record` writes it as JSON to ``benchmarks/records/<benchmark>[-<variant>].json``
with the question it answers, the exact command, the machine (CPU, ISA, cores, memory), the commit, the date and
the versions of what it ran on, and prints the same rows as a markdown table. ``benchmarks/render.py`` puts the
committed records into the docs, so a figure in the docs always has its record, and a changed figure is a
changed record.

Run benchmarks from the repository root as modules (``python -m benchmarks.query_latency --help``); the
development data is read from ``BIORANK_DATA``, else ``../shared/data`` beside the repository, as the tests read it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.machine import cpu_isa, machine

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BIORANK_DATA") or ROOT.parent / "shared" / "data")
"""The development data folder: ``BIORANK_DATA`` where set (``biorank datasets get`` fills one), as the tests read
it, else ``../shared/data`` beside the repository."""
RECORDS = ROOT / "benchmarks" / "records"
RECORDS_ENV = "BIORANK_RECORDS_DIR"
"""Where records go instead of ``benchmarks/records`` (the tests write theirs to a temporary folder)."""

PATHS = {
    "scifact": "scifact",
    "scifact-corpus": "scifact/corpus.jsonl",
    "scifact-queries-train": "scifact/queries_train.jsonl",
    "scifact-claims-train": "scifact/claims_train.jsonl",
    "scifact-qrels-train": "scifact/qrels/train.tsv",
    "nfcorpus-docs": "nfcorpus/dev.docs",
    "nfcorpus-queries": "nfcorpus/dev.titles.queries",
    "nfcorpus-qrels": "nfcorpus/dev.2-1-0.qrel",
    "bioasq": "bioasq",
    "bioasq7b-abstracts": "bioasq/abstracts/biobert_7b_full_abstract.jsonl",
    "bioasq7b-golden": "bioasq/Task7BGoldenEnriched",
}
"""The development data the benchmarks read, by name, under :data:`DATA` (see its README)."""

# Library versions a figure can depend on; a record lists those installed.
VERSIONED = ("biorank", "numpy", "onnxruntime", "tokenizers", "torch", "transformers", "sentence-transformers",
             "opensearch-py", "openvino")

T = TypeVar("T")


def data(name: str) -> Path:
    """The path of a named data set under :data:`DATA`.

    Args:
        name: one of :data:`PATHS`.

    Returns:
        The path (whether it exists is the reader's to say).

    Example:
        >>> data("scifact-corpus").name
        'corpus.jsonl'
    """
    try:
        return DATA / PATHS[name]
    except KeyError:
        raise SystemExit(f"unknown data set {name!r}; known: {', '.join(PATHS)}") from None


def parser(doc: str | None, file: str, *, cluster: bool = True, index: str | None = None,
           queries: str | None = None) -> argparse.ArgumentParser:
    """The benchmark's argument parser with the suite's shared arguments.

    Args:
        doc: the script's docstring: its first line is the question the benchmark answers, the rest its usage.
        file: the script's ``__file__``: names the benchmark and its module.
        cluster: whether it talks to a cluster (adds ``--url``).
        index: the default ``--index``, if it reads one.
        queries: the named data set of its queries (adds ``--queries`` and ``--limit``), if it asks any.

    Returns:
        The parser; its namespace carries ``benchmark``, ``module`` and ``question`` for :func:`record`.

    Example:
        >>> args = parser("Q?\\n\\nUsage.", "benchmarks/x.py", index="scifact").parse_args([])
        >>> (args.benchmark, args.index, args.url)
        ('x', 'scifact', None)
    """
    doc = doc or ""
    question = doc.strip().split("\n\n")[0].replace("\n", " ")
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    path = Path(file).resolve()
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts) if path.is_relative_to(ROOT) else path.stem
    made.set_defaults(benchmark=path.stem, module=module, question=question)
    if cluster:
        made.add_argument("--url", help="cluster URL (default: biorank's local node, started if needed)")
    if index is not None:
        made.add_argument("--index", default=index, help=f"the index to measure (default {index})")
    if queries is not None:
        made.add_argument("--queries", type=Path, default=data(queries), help="the queries (a JSONL file)")
        made.add_argument("--limit", type=int, default=0, help="queries to time (0: all)")
    made.add_argument("--records-dir", type=Path, default=None,
                      help=f"where the JSON record goes (default ${RECORDS_ENV} or benchmarks/records)")
    made.add_argument("--no-record", action="store_true", help="print the table only, write no record")
    return made


def connect(args: argparse.Namespace) -> Any:
    """A client of the cluster ``--url`` names (or the local node), through biorank's public API."""
    from biorank import ConnectionSettings
    from biorank import connect as connect_to

    return connect_to(ConnectionSettings.from_env().with_overrides(url=getattr(args, "url", None)), echo=print)


def timed(work: Callable[[T], object], items: Sequence[T], *, warm: int = 0, repeat: int = 1) -> list[float]:
    """Milliseconds of ``work(item)`` per item, one at a time, after ``warm`` unmeasured calls.

    The first calls pay for kernels, allocations, caches and the JIT; the warm-up keeps them out.

    Args:
        work: what is timed, called with one item.
        items: the items, each timed ``repeat`` times (passes one after another).
        warm: how many of the first items run once, unmeasured, first.
        repeat: passes over ``items``.

    Returns:
        One time in ms per call, in call order.

    Example:
        >>> len(timed(lambda x: x * 2, [1, 2, 3], warm=1, repeat=2))
        6
    """
    for item in items[:warm]:
        work(item)
    times = []
    for _ in range(repeat):
        for item in items:
            started = time.perf_counter()
            work(item)
            times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (1-99), inclusive method; the one value itself where there is one."""
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def summary(ms: Sequence[float]) -> dict[str, float]:
    """p50, p95 and mean of a list of times, rounded as records keep them.

    Example:
        >>> summary([1.0, 2.0, 3.0])["p50"]
        2.0
    """
    return {"p50": round(percentile(ms, 50), 2), "p95": round(percentile(ms, 95), 2),
            "mean": round(statistics.fmean(ms), 2)}


@dataclass(frozen=True)
class Column:
    """One column of a result table: the row's key, its header, and how its numbers are written.

    A key ``"a+b"`` writes two figures in one cell, ``"a / b"`` (p50 / p95, dense / hybrid): the record keeps
    each as a number of its own.
    """

    key: str
    header: str
    format: str = ""  # a format spec such as ",.1f"; empty: the value as it is

    def cell(self, row: dict) -> str:
        return " / ".join(self._one(row.get(key)) for key in self.key.split("+"))

    def numeric(self, row: dict) -> bool:
        """Whether the cell holds a figure (aligned right): a number, or text that starts with one ("0.94†")."""
        value = row.get(self.key.split("+")[0])
        if isinstance(value, str):
            return bool(re.match(r"\*{0,2}[\d.][\d.,]*(\W|$)", value))
        return isinstance(value, int | float) and not isinstance(value, bool)

    def _one(self, value: object) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool) or not isinstance(value, int | float) or not self.format:
            return str(value)
        return format(value, self.format)


def columns(*specs: tuple[str, ...]) -> list[Column]:
    """``columns(("p50", "p50 ms", ".1f"), ...)``: the table's columns from (key, header[, format]) tuples."""
    return [Column(*spec) for spec in specs]


def markdown(cols: Sequence[Column], rows: Iterable[dict]) -> str:
    """The rows as a markdown table; columns of numbers align right."""
    rows = list(rows)
    numeric = [any(c.numeric(r) for r in rows) for c in cols]
    lines = ["| " + " | ".join(c.header for c in cols) + " |",
             "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(c.cell(r).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def commit() -> tuple[str, bool]:
    """The checkout's commit, and whether biorank's or the benchmarks' files differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "biorank", "benchmarks"],
                                 capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return head, any(not line.endswith(".json") for line in changed.splitlines())


def versions(client: Any = None, extra: Iterable[str] = ()) -> dict[str, str]:
    """Python's and the installed libraries' versions, and the cluster's engine version when a client is given."""
    found = {"python": sys.version.split()[0]}
    for name in (*VERSIONED, *extra):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if client is not None:
        found["opensearch"] = client.info()["version"]["number"]
    return found


def records_dir(args: argparse.Namespace) -> Path:
    return Path(args.records_dir or os.environ.get(RECORDS_ENV) or RECORDS)


def record(args: argparse.Namespace, cols: Sequence[Column], rows: list[dict], *, variant: str | None = None,
           settings: dict | None = None, client: Any = None, notes: str | None = None,
           extra_versions: Iterable[str] = (), measured_on: dict | None = None) -> Path | None:
    """Print the result as a table and write it as the benchmark's record.

    Args:
        args: the parsed arguments (from :func:`parser`): name the benchmark, its question and the records' folder.
        cols: the table's columns.
        rows: the result, one dict per row (numbers as numbers).
        variant: names one of several records of one benchmark (``<benchmark>-<variant>.json``).
        settings: what the run was asked for, beyond the command (sizes, models, counts).
        client: the cluster's client, to record its engine version.
        notes: one or two sentences a reader of the table needs (the load on the machine, a caveat).
        extra_versions: distributions whose versions matter to this benchmark beyond the usual ones.
        measured_on: ``{"machine": ..., "versions": ...}`` of the machine that took the figures, where that was
            not this one (a GPU box whose outputs are compared here: ``gpu_stages --compare``).

    Returns:
        The record's path, or None with ``--no-record``.

    Example:
        >>> cols = columns(("mode", "mode"), ("p50", "p50 ms", ".1f"))
        >>> record(args, cols, [{"mode": "bm25", "p50": 2.2}])  # doctest: +SKIP
    """
    print(markdown(cols, rows), flush=True)
    if args.no_record:
        return None
    head, dirty = commit()
    document = {
        "benchmark": args.benchmark,
        "variant": variant,
        "question": args.question,
        "command": shlex.join(["python", "-m", args.module, *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": head + ("+changes" if dirty else ""),
        "machine": measured_on["machine"] if measured_on else machine(),
        "versions": measured_on["versions"] if measured_on else versions(client, extra_versions),
        "settings": settings or {},
        "columns": [asdict(c) for c in cols],
        "results": [{key: _plain(value) for key, value in row.items()} for row in rows],
        **({"notes": notes} if notes else {}),
    }
    folder = records_dir(args)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{args.benchmark}{f'-{variant}' if variant else ''}.json"
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"record: {path}", flush=True)
    return path


def _plain(value: Any) -> Any:
    """JSON's own values: NaN (a figure not measured) becomes null, numpy's scalars Python's."""
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def read_record(path: Path) -> dict:
    """A record as :func:`record` wrote it (or as transcribed from an earlier session's table)."""
    return json.loads(path.read_text(encoding="utf-8"))


def header(what: str) -> None:
    """The line every run prints first: the machine, then what is measured."""
    print(f"CPU: {cpu_isa()}; {what}", flush=True)
