"""Writes the docs' measurement tables from the committed benchmark records, or checks that they are current.

A generated table sits in README.md, benchmarks/README.md, a page under docs/ or a shipped model's card between the
markers ``<!-- table: NAME -->`` and ``<!-- /table: NAME -->``; everything between them is this script's. Each table of
figures ends with a line naming the record(s) it comes from, their machine, date and commit, so every figure in
the docs has its record and a changed figure is a changed record; benchmarks/README.md's index of the scripts is
written from their docstrings' questions and the records (with each study's ``decision``).

    python benchmarks/render.py            # rewrite every page's tables from benchmarks/records/*.json
    python benchmarks/render.py --check    # exit 1, naming page and table, if any page is out of date
    python benchmarks/render.py --list     # the table names and the records they read
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as ``python benchmarks/render.py``, as the docs say, not as a module
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite import RECORDS, ROOT, Column, markdown, read_record

HERE = Path(__file__).resolve().parent
SHARED = frozenset({"__init__", "suite", "machine", "render"})
"""The suite's own modules: no benchmark among them."""


class RenderError(Exception):
    """A page names a table this script does not know, or a record is missing."""


@dataclass(frozen=True)
class Table:
    """A table of the docs: one record's rows (all, or some columns), or rows composed from several records."""

    record: str = ""
    """The record's file name without ``.json``."""
    columns: tuple[str, ...] = ()
    """Keys of the record's columns to show (default: all)."""
    headers: tuple[tuple[str, str], ...] = ()
    """(key, header) pairs: headers other than the record's."""
    compose: Callable[[Path], tuple[list[Column], list[dict], list[str]]] | None = field(default=None, compare=False)
    """Builds (columns, rows, records read) itself: a table across records."""
    dated: bool = True
    """Whether the line under the table gives each record's date and commit (README.md carries no dates)."""
    sourced: bool = True
    """Whether a line under the table names its records (an index of the records names them in its rows)."""


DASH = "\N{EN DASH}"  # a range, as the docs write it


def _row(record: dict, starts: str) -> dict:
    first = record["columns"][0]["key"]
    return next(r for r in record["results"] if str(r[first]).startswith(starts))


def speed_of_defaults(folder: Path) -> tuple[list[Column], list[dict], list[str]]:
    """README's speed table: the defaults' figures picked from several records of one machine."""
    fused, cold, warm = (read_record(folder / f"{name}.json") for name in (
        "query_latency-fused-kernels", "cold_query-external-weights", "query_latency-four-runs"))
    fresh = sorted(_row(cold, f"hybrid, run {n}")["after_p50_s"] for n in (1, 2))
    bm25, hybrid = (_row(warm, mode) for mode in ("bm25", "hybrid"))
    rerank = _row(fused, "cross-encoder")
    cells = {
        "indexing with sentences, bge-small-en-v1.5, ONNX Runtime (docs/s)":
            f"{_row(fused, 'indexing 300 abstracts')['after_end_to_end_docs_per_s']:.1f}",
        "a fresh `biorank query`, hybrid, wall (p50)": f"{fresh[0]:.2f}{DASH}{fresh[1]:.2f} s",
        f"warm first stage, SciFact's {warm['settings']['encoder']} index ({warm['settings']['blocks']:,} blocks): "
        "bm25 / hybrid (p50)":
            f"{bm25['p50_min']}{DASH}{bm25['p50_max']} / {hybrid['p50_min']}{DASH}{hybrid['p50_max']} ms",
        "rerank 20 hits with the shipped cross-encoder, fp32 / int8 (p50)":
            f"{rerank['after_fp32_ms']:,} / {rerank['after_int8_ms']:,} ms",
    }
    machines = {f"{r['machine']['cpu']}, {r['machine']['cores']} cores, {r['machine']['isa']}"
                for r in (fused, cold, warm)}
    if len(machines) != 1:
        raise RenderError(f"readme-speed mixes machines: {sorted(machines)}")
    label = machines.pop() + (" only" if fused["machine"]["isa"] == "AVX2" else "")
    rows = [{"what": what, "m0": value} for what, value in cells.items()]
    return ([Column("what", "what"), Column("m0", label)], rows,
            ["query_latency-fused-kernels", "cold_query-external-weights", "query_latency-four-runs"])


def default_lambdas(folder: Path) -> tuple[list[Column], list[dict], list[str]]:
    """The λ an index uses until one is tuned, per encoder: from the code (the catalogue and the config), not a
    record, so the docs say what the code does."""
    from biorank.config import DEFAULT_LAMBDA
    from biorank.models.catalogue import MAVEN_MODELS

    rows = [{"encoder": name, "lambda": model.default_lambda or DEFAULT_LAMBDA} for name, model in MAVEN_MODELS.items()]
    rows.append({"encoder": "any other (all-MiniLM-L6-v2, a folder, a hub name)", "lambda": DEFAULT_LAMBDA})
    return [Column("encoder", "encoder of the index"), Column("lambda", "λ until tuned", "g")], rows, []


PUBMED_YEAR = (("1.5 million records", 1_500_000), ("4 million records", 4_000_000),
               ("one day's file (~11,000)", 11_000))
"""What a year of NLM's update files brings, as docs/guides/indexing.md assumes it (its reasons are there)."""


def _duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:,.0f} h" if hours >= 10 else f"{hours:.1f} h" if hours >= 1 else f"{seconds / 60:.0f} min"


def pubmed_year(folder: Path) -> tuple[list[Column], list[dict], list[str]]:
    """docs/guides/indexing.md's year of update files: its assumed record counts over the rates of two records, the
    sync measured beside other work and the same encoder's indexing on idle CPUs."""
    sync, idle = (read_record(folder / f"{name}.json") for name in ("pubmed_sync", "index_throughput-encoders"))
    rates = [
        ("`--no-sentences`", sync, _row(sync, "off")["new"], "other work on the CPUs"),
        ("`--no-sentences`", idle, _row(idle, "indexing, `--no-sentences`, docs/s, onnx")["bge_small_en_v1_5"], "idle"),
        ("with sentences", sync, _row(sync, "on")["new"], "other work on the CPUs"),
        ("with sentences", idle, _row(idle, "indexing, with sentences, docs/s, onnx")["bge_small_en_v1_5"], "idle"),
    ]
    rows = [{"how": f"{how}, {record['machine']['cpu']}, {load} ({rate:.1f}/s)",
             **{label: _duration(count / rate) for label, count in PUBMED_YEAR}} for how, record, rate, load in rates]
    columns = [Column("how", "a year of update files, default encoder, 2 CPUs")]
    columns += [Column(label, label) for label, _ in PUBMED_YEAR]
    return columns, rows, ["pubmed_sync", "index_throughput-encoders"]


def _question(script: Path) -> str:
    """The question a script answers: its docstring's first paragraph, on one line."""
    text = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    return " ".join(text.split("\n\n")[0].split())


def _by_benchmark(folder: Path) -> dict[str, list[tuple[str, dict]]]:
    """Each benchmark's records (name, record), the latest first."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for path in sorted(folder.glob("*.json")):
        record = read_record(path)
        found.setdefault(record["benchmark"], []).append((path.stem, record))
    return {name: sorted(records, key=lambda item: item[1]["date"], reverse=True) for name, records in found.items()}


def _names(records: list[tuple[str, dict]]) -> str:
    return ", ".join(f"`{name}`" for name, _ in records) or "none yet"


def measurement_index(folder: Path) -> tuple[list[Column], list[dict], list[str]]:
    """benchmarks/README.md's index of the repeatable measurements: each script's question and its records."""
    records = _by_benchmark(folder)
    rows = [{"question": _question(script), "script": f"`{script.name}`",
             "records": _names(records.get(script.stem, []))}
            for script in sorted(HERE.glob("*.py")) if script.stem not in SHARED]
    return [Column("question", "question"), Column("script", "script"), Column("records", "last record(s)")], rows, []


def study_index(folder: Path) -> tuple[list[Column], list[dict], list[str]]:
    """benchmarks/README.md's index of the decision studies: each study's question, the decision its records
    carry (``decision``, written by whoever drew it) and the records."""
    records = _by_benchmark(folder)
    rows = []
    for script in sorted((HERE / "studies").glob("*.py")):
        if script.stem in SHARED:
            continue
        own = records.get(script.stem, [])
        decision = " ".join(dict.fromkeys(r["decision"] for _, r in own if r.get("decision"))) or "—"
        rows.append({"question": _question(script), "script": f"`studies/{script.name}`", "decision": decision,
                     "records": _names(own)})
    columns = [Column("question", "question"), Column("script", "script"),
               Column("decision", "decision (details: docs/measurements/)"), Column("records", "record(s)")]
    return columns, rows, []


TABLES: dict[str, Table] = {
    # benchmarks/README.md, the suite's own index
    "benchmark-index": Table(compose=measurement_index, sourced=False),
    "study-index": Table(compose=study_index, sourced=False),
    # docs/concepts/index-record.md: what the code does, from the code
    "default-lambda": Table(compose=default_lambdas, sourced=False),
    # README.md, the front door
    "readme-quality": Table("eval-rerank-weight", ("query_set", "hybrid", "rerank_w", "cross_encoder_alone"),
                            (("rerank_w", "+ rerank (default weight 0.3)"),), dated=False),
    "readme-speed": Table(compose=speed_of_defaults, dated=False),
    # the shipped cross-encoder's card (biorank/models/reranker/README.md)
    "card-seeds": Table("train_reranker-seeds"),
    "card-onnx": Table("eval-rerank-onnxruntime"),
    "card-bioasq-batches": Table("eval-rerank-bioasq-batches"),
    # docs/: measurements and decisions
    "rerank-weight": Table("eval-rerank-weight"),
    "encoder-choice": Table("encoder_choice"),
    "lambda-default": Table("tune_lambda-bge-hash-dev"),
    "first-stage-modes": Table("eval-first-stage-modes"),
    "rerank-length": Table("eval-rerank-length"),
    "snippet-weights": Table("eval-snippet-weights"),
    "snippet-defaults": Table("snippet_defaults"),
    "sentence-store": Table("sentence_store"),
    "snippet-metric": Table("snippet_metric"),
    "train-encoder-minilm": Table("train_encoder-minilm"),
    "encoder-all-sources": Table("encoder_choice-all-sources"),
    "reranker-all-sources": Table("train_reranker-minilm-all-sources"),
    "reranker-base": Table("train_reranker-base"),
    "reranker-gpu-epochs": Table("train_reranker-gpu-epochs"),
    "unseen-dev-sizes": Table("unseen_dev-sizes"),
    "unseen-dev-hybrid-scifact": Table("unseen_dev-hybrid-scifact"),
    "unseen-dev-hybrid-bioasq": Table("unseen_dev-hybrid-bioasq"),
    "unseen-dev-hybrid-nfcorpus": Table("unseen_dev-hybrid-nfcorpus"),
    "ensembles": Table("ensembles"),
    "first-stage-feedback-scifact": Table("first_stage_feedback-scifact"),
    "first-stage-feedback-nfcorpus": Table("first_stage_feedback-nfcorpus"),
    "first-stage-feedback-bioasq": Table("first_stage_feedback-bioasq"),
    "first-stage-fields-scifact": Table("first_stage_fields-scifact"),
    "first-stage-fields-bioasq": Table("first_stage_fields-bioasq"),
    "first-stage-fields-nfcorpus": Table("first_stage_fields-nfcorpus"),
    "first-stage-fields-pubmedqa": Table("first_stage_fields-pubmedqa"),
    "second-dense-view": Table("second_dense_view"),
    "second-dense-view-cost": Table("second_dense_view-cost"),
    "unseen-dev-bm25-scifact": Table("unseen_dev-bm25-scifact-unseen"),
    "unseen-dev-bm25-scifact-seen": Table("unseen_dev-bm25-scifact-seen"),
    "unseen-dev-bm25-nfcorpus": Table("unseen_dev-bm25-nfcorpus"),
    "train-cost": Table("train_cost"),
    "speed-precision-avx512": Table("index_throughput-precision-avx512"),
    "speed-precision-avx2": Table("index_throughput-precision-avx2"),
    "speed-encoders": Table("index_throughput-encoders"),
    "speed-fused-kernels": Table("query_latency-fused-kernels"),
    "query-latency-four-runs": Table("query_latency-four-runs"),
    "cold-query": Table("cold_query-external-weights"),
    "engine-versions": Table("engine_versions"),
    "scale-speed": Table("scale-speed"),
    "scale-quality": Table("scale-quality"),
    "scale-million": Table("scale-million"),
    "study-bm25-analyzers": Table("bm25_analyzers"),
    "study-sentence-splitters": Table("sentence_splitters"),
    "study-reranker-speed": Table("reranker_speed"),
    "study-reranker-depth": Table("reranker_depth-students"),
    "study-reranker-window": Table("reranker_depth-window"),
    "study-reranker-pubmed": Table("reranker_depth-pubmed"),
    "study-openvino": Table("openvino_compare"),
    "study-encoder-precision": Table("encoder_precision"),
    "install-size": Table("install_size-light"),
    "index-size": Table("index_size-scifact"),
    "study-light-install": Table("light_install"),
    "study-light-install-no-amx": Table("light_install-no-amx"),
    "query-latency-modes": Table("query_latency-modes"),
    "query-latency-knn-score": Table("query_latency-knn-score"),
    "index-throughput-sentences": Table("index_throughput-sentences"),
    "index-throughput-vectors": Table("index_throughput-vectors-1nodes"),
    "index-throughput-vectors-3nodes": Table("index_throughput-vectors-3nodes"),
    "pubmed-sync": Table("pubmed_sync"),
    "pubmed-year": Table(compose=pubmed_year),
    "container-image": Table("container_image"),
    "query-log-overhead-batched": Table("query_log_overhead-batched"),
    "query-log-overhead-single": Table("query_log_overhead-single"),
    "serve-load": Table("serve_load"),
    "serve-contention": Table("serve_load-contention"),
    "serve-faults": Table("serve_faults-fault"),
    "serve-soak": Table("serve_faults-soak"),
}
"""Every table the docs may hold, by the name its markers carry."""

MARKERS = re.compile(r"(<!-- table: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /table: (?P=name) -->)", re.DOTALL)


def where_measured(record: dict) -> str:
    """The machine a record's figures come from, as the line under a table names it: the CPU (and a GPU beside it),
    or the GPU alone where quality figures were scored there and the CPU was not recorded."""
    machine = record["machine"]
    gpu = machine.get("accelerator")
    if gpu and machine["cpu"].startswith("not recorded") and machine["isa"] == "not recorded":
        return f"scored on {gpu}" + (f" in {record['scored_with']}" if record.get("scored_with") else "")
    if machine["cpu"] == machine["isa"] == "not recorded":
        return f"machine not recorded, {machine['cores']} cores"
    return f"{machine['cpu']}, {machine['cores']} cores, {machine['isa']}" + (f", {gpu}" if gpu else "")


def source_line(records: list[dict], names: list[str], dated: bool = True) -> str:
    """The italic line under a table: each record's file, machine, date and commit (and where it was copied from)."""
    parts = []
    for name, record in zip(names, records, strict=True):
        copied = f", transcribed from `{record['transcribed_from']}`" if record.get("transcribed_from") else ""
        when = f"; {record['date']}; commit {record['commit']}{copied}" if dated else ""
        parts.append(f"`benchmarks/records/{name}.json` ({where_measured(record)}{when})")
    return "*Record" + ("s" if len(parts) > 1 else "") + ": " + "; ".join(parts) + ".*"


def render(name: str, folder: Path = RECORDS) -> str:
    """The markdown a table's markers hold: the table, then the line naming its records.

    Args:
        name: a key of :data:`TABLES`.
        folder: where the records are.

    Returns:
        The text between the markers (starts and ends with a newline).

    Example:
        >>> render("serve-load").startswith("\\n| system |")
        True
    """
    if name not in TABLES:
        raise RenderError(f"unknown table {name!r}; known: {', '.join(sorted(TABLES))}")
    table = TABLES[name]
    try:
        if table.compose is not None:
            columns, rows, names = table.compose(folder)
        else:
            record = read_record(folder / f"{table.record}.json")
            columns = [Column(**c) for c in record["columns"]]
            if table.columns:
                columns = [c for key in table.columns for c in columns if c.key == key]
            renamed = dict(table.headers)
            columns = [Column(c.key, renamed.get(c.key, c.header), c.format) for c in columns]
            rows, names = record["results"], [table.record]
        records = [read_record(folder / f"{n}.json") for n in names]
    except FileNotFoundError as error:
        raise RenderError(f"table {name!r}: no record {Path(error.filename).name} in {folder}") from None
    source = f"{source_line(records, names, table.dated)}\n\n" if table.sourced else ""
    return f"\n{markdown(columns, rows)}\n\n{source}"


def pages(root: Path = ROOT) -> list[Path]:
    """README.md, benchmarks/README.md, every markdown page under docs/ and the shipped models' cards (the docs
    include the cross-encoder's)."""
    found = [page for page in (root / "README.md", root / "benchmarks" / "README.md") if page.is_file()]
    found += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return found + sorted(root.glob("biorank/models/*/README.md"))


def rewrite(text: str, folder: Path = RECORDS) -> tuple[str, list[str]]:
    """``text`` with every table between markers rendered again, and the names of the tables that changed."""
    changed: list[str] = []

    def one(match: re.Match) -> str:
        body = render(match["name"], folder)
        if body != match["body"]:
            changed.append(match["name"])
        return match[1] + body + match[4]

    return MARKERS.sub(one, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any page is out of date")
    parser.add_argument("--list", action="store_true", help="print the table names and their records")
    parser.add_argument("--records", type=Path, default=RECORDS, help="the records' folder")
    parser.add_argument("--root", type=Path, default=ROOT, help="the folder of README.md and docs/")
    args = parser.parse_args(argv)
    if args.list:
        for name, table in sorted(TABLES.items()):
            print(f"{name}: {table.record or table.compose.__name__}")
        return 0
    stale = []
    for page in pages(args.root):
        text = page.read_text(encoding="utf-8")
        try:
            new, changed = rewrite(text, args.records)
        except RenderError as error:
            print(f"{page.relative_to(args.root)}: {error}", file=sys.stderr)
            return 2
        for name in changed:
            stale.append(f"{page.relative_to(args.root)}: table {name} differs from its record(s)")
        if changed and not args.check:
            page.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("\n".join(stale) + "\nrun: python benchmarks/render.py", file=sys.stderr)
        return 1
    for line in stale:
        print(line.replace("differs from its record(s)", "rewritten"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
