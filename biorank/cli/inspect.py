"""Commands that read back what is stored and asked: a document, an index's facts, the query log, and
the Dashboards objects that show them."""

from __future__ import annotations

from pathlib import Path

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.render import console, json_text, plain, say, shorten, table
from biorank.config import ConnectionSettings


def _vector_cells(vector: dict | None) -> tuple[str, str]:
    return (str(vector["dimension"]), f"{vector['norm']:.4f}") if vector else ("-", "-")


@cli.command("inspect")
@click.argument("doc_id")
@options.index_option()
@click.option("--json", "as_json", is_flag=True, help="The document as JSON (vectors as dimension and norm).")
@click.pass_obj
def inspect_document(settings: ConnectionSettings, doc_id: str, index_name: str, as_json: bool) -> None:
    """Print a stored document: its fields, its blocks, its sentences with offsets, and every vector's
    dimension and norm (unit vectors have norm 1)."""
    from biorank.store.inspection import inspect_document

    document = inspect_document(options.client(settings), index_name, doc_id)
    if as_json:
        click.echo(json_text(document.to_dict(), indent=2))
        return
    out = console()
    out.print(plain(f"{document.index} / {document.id}: {len(document.blocks)} block(s), {len(document.sentences)} "
                    f"sentence(s) in {document.sentences_index or 'no sentences index'}"))
    if not document.fields:
        out.print("block 0 is missing: the document is not completely in (run the same biorank index again)")
    rows = [(name, value if name in ("title", "abstract") else shorten(value))
            for name, value in document.fields.items()]
    out.print(table("fields (block 0)", ["field", "value"], rows))
    out.print(table("blocks", ["block", "_id", "passage chars", "word pieces", "dim", "norm", "passage"], [
        (b.get("block"), b["_id"], len(b.get("passage", "")), len(b.get("wordpieces", "").split()),
         *_vector_cells(b.get("vector")), shorten(b.get("passage", ""), 80)) for b in document.blocks]))
    if document.sentences:
        out.print(table("sentences", ["section", "#", "begin", "end", "dim", "norm", "text"], [
            (s.get("section"), s.get("number"), s.get("begin"), s.get("end"), *_vector_cells(s.get("vector")),
             s.get("text", "")) for s in document.sentences]))


@cli.command()
@options.index_option()
@click.option("--json", "as_json", is_flag=True, help="The facts as JSON.")
@click.pass_obj
def stats(settings: ConnectionSettings, index_name: str, as_json: bool) -> None:
    """Print an index's counts, sizes, encoder, mapping version, BM25 parameters, λ and every tuned setting."""
    from biorank.retrieval.searcher import SearchSettings
    from biorank.store.inspection import flatten, index_stats

    facts = index_stats(options.client(settings), index_name)
    search = SearchSettings()
    exact = not search.takes_union(facts.blocks)
    route = (f"exact, every block ({facts.blocks:,} ≤ {search.exact_limit:,})" if exact else
             f"candidate union of the BM25 and kNN top {search.union_candidates:,} ({facts.blocks:,} blocks > "
             f"{search.exact_limit:,}; --exact-limit changes it)")
    if as_json:
        facts_json = facts.to_dict() | {"hybrid_route": "exact" if exact else "candidate union"}
        click.echo(json_text(facts_json, indent=2))
        return
    s = facts.settings
    sizes = " + ".join(f"{size / 1e6:.1f} MB ({name})" for name, size in facts.size_bytes.items())
    rows = [
        ("index", facts.index), ("sentences index", facts.sentences_index or "none"),
        ("documents", f"{facts.documents:,}"), ("blocks", f"{facts.blocks:,}"), ("sentences", f"{facts.sentences:,}"),
        ("size", sizes),
        ("per abstract", " + ".join(f"{size / 1e3:.1f} KB ({name})" for name, size in facts.bytes_per_document.items())
         + " as stored now (index and sync merge a large build when it ends)"),
        *((("sentence vectors", facts.sentence_vectors),) if facts.sentence_vectors else ()),
        ("encoder", f"{facts.model} ({facts.dimension} dimensions)" + (
            f", loaded from {facts.model_source}" if facts.model_source not in (None, facts.model) else "")),
        ("prefixes", ", ".join(f"{role} {text!r}" for role, text in facts.prefixes.items()) or "none"),
        ("mapping version", facts.mapping_version),
        ("BM25", f"k1 {s.get('k1')}, b {s.get('b')}, {s.get('analyzer')} analyser"),
        ("shards / replicas", f"{s.get('shards')} / {s.get('replicas')}"),
        ("hybrid", route),
        ("block budget", f"{facts.block_tokens} word pieces"),
        ("λ", f"{facts.lam:g}" + (" (tuned)" if facts.lambda_tuned else " (default; biorank tune-lambda tunes it)")),
        *((("last file applied", f"{facts.last_file['name']} on {facts.last_file['applied']} ({facts.files_applied:,} "
             "applied by biorank sync)"),) if facts.last_file else ()),
        *((f"tuned: {key}", shorten(value)) for key, value in flatten(facts.tuned).items()),
    ]
    console().print(table(None, ["", ""], rows, header=False))


@cli.command()
@click.option("--recalibrate", is_flag=True, help="Time the backends again (a few seconds each).")
@click.option("--json", "as_json", is_flag=True, help="The machine, the times and the choices as JSON.")
def machine(recalibrate: bool, as_json: bool) -> None:
    """Show the machine's CPU, the backends' times on it and what precision auto takes for each stage.

    \b
    auto does not guess from the CPU's flags: the first model placed with auto on a CPU where several backends
    could run it times each of them once (the shipped cross-encoder, a batch of abstract pairs and one of
    sentences), and the fastest is taken from then on; ONNX Runtime fp32 unless another is clearly faster. The
    times are kept per CPU model and installed versions; --recalibrate times them again (after a BIOS change or
    under a different load).

    \b
    Examples:
      biorank machine
      biorank machine --recalibrate
    """
    from biorank.models.calibration import SHAPES, calibrate, calibration_file, kept
    from biorank.models.calibration import machine as facts_of
    from biorank.models.placement import Placement, cpu_candidates

    entry = calibrate(say=say) if recalibrate else kept()
    facts = entry.machine if entry else facts_of()
    timed = {stage: entry.stage_ms(stage) if entry else None for stage in ("documents", "pairs")}
    choices = {stage: Placement.choose("auto", "cpu", stage, measured=timed.get(stage)).name
               for stage in ("documents", "pairs", "queries")}
    if as_json:
        click.echo(json_text({"machine": facts, "timed": entry.date if entry else None,
                              "ms": entry.ms if entry else {}, "auto": choices}, indent=2))
        return
    rows = [("CPU", f"{facts['cpu'] or 'unknown'}, {facts['cores']} cores, {' '.join(facts['flags']) or 'no AVX2'}"),
            ("installed", ", ".join(f"{name} {version}" for name, version in facts["versions"].items())),
            ("timed", f"{entry.date} (kept in {calibration_file()})" if entry else
             "never: the first model placed with auto on the CPU times the backends, or --recalibrate")]
    for name, times in (entry.ms.items() if entry else ()):
        rows.append((name, ", ".join(f"{SHAPES[shape][0]} pairs of {SHAPES[shape][1]}: {ms:,.0f} ms"
                                     for shape, ms in times.items())))
    for stage in ("documents", "pairs"):
        several = len(cpu_candidates(stage)) > 1  # type: ignore[arg-type]
        unsure = " (until the backends are timed)" if several else " (the only backend here)"
        rows.append((f"auto, {stage}", choices[stage] + ("" if entry else unsure)))
    rows.append(("auto, queries", choices["queries"]))
    console().print(table(None, ["", ""], rows, header=False))


@cli.command("log")
@click.option("--last", "-n", type=options.RUN_DEPTH, default=20, show_default=True,
              help="How many records: the most recent.")
@click.option("--index", "searched_index", default=None, help="Only the queries on this documents index.")
@click.option("--json", "as_json", is_flag=True, help="Records as JSON lines, as stored.")
@click.pass_obj
def query_log(settings: ConnectionSettings, last: int, searched_index: str | None, as_json: bool) -> None:
    """Print the most recent query-log records, oldest first: what was asked where, how, how fast, and the
    top hits with their score parts (the log index is biorank-queries, or BIORANK_QUERY_LOG_INDEX)."""
    from biorank.store.names import check_query_log_name
    from biorank.store.query_log import recent_queries

    check_query_log_name(settings.query_log_index)  # a setting to fix: said before any cluster is reached
    records = recent_queries(options.client(settings), settings.query_log_index, last=last,
                             searched_index=searched_index)[::-1]
    if as_json:
        for record in records:
            click.echo(json_text(record))
        return
    if not records:
        say("the query log has no records" + (f" for {searched_index!r}" if searched_index else ""))
        return
    rows = []
    for r in records:
        ms = "\n".join(f"{stage} {value:.1f}" for stage, value in r.get("latency_ms", {}).items())
        top = "\n".join(f"{h.get('id')} {h['score']:.4g}" if "score" in h else str(h.get("id"))
                        for h in r.get("hits", [])[:3])
        how = f"{r.get('command')}: {r.get('system') or r.get('mode')}\n" + (
            "" if r.get("lambda") is None else f"λ {r['lambda']:g}, ") + f"k {r.get('k')}"
        rows.append((r.get("timestamp", "")[5:19].replace("T", " "), r.get("index"), how, r.get("query"), ms, top))
    console().print(table(f"{len(records)} most recent queries (UTC; --json for every score part)", [
        "time", "index", "how", "query", "ms", "top 3 (score)"], rows, no_wrap=("time", "top 3 (score)")))


@cli.group()
def dashboards() -> None:
    """OpenSearch Dashboards: biorank's index patterns, saved searches, visualisations and dashboard.

    \b
    docker compose -f docker/docker-compose.yml up -d    # OpenSearch and Dashboards
    BIORANK_URL=http://localhost:9200 biorank demo       # documents and a first query-log record
    biorank dashboards import                            # then open the dashboard it prints
    """


@dashboards.command("import")
@click.option("--url", "dashboards_url", default=None, envvar="BIORANK_DASHBOARDS_URL",
              help="OpenSearch Dashboards [env: BIORANK_DASHBOARDS_URL; default: http://localhost:5601]. --user, "
                   "--password, --ca-file and --no-verify of `biorank` apply to it too.")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Saved objects (NDJSON) [default: the ones biorank ships, docker/dashboards/biorank.ndjson].")
@click.pass_obj
def dashboards_import(settings: ConnectionSettings, dashboards_url: str | None, path: Path | None) -> None:
    """Import the saved objects into Dashboards, overwriting earlier versions of them, and list them."""
    from biorank.dashboards.saved_objects import DEFAULT_URL, import_saved_objects

    report = import_saved_objects(dashboards_url or DEFAULT_URL, path, user=settings.user, password=settings.password,
                                  ca_file=settings.ca_file, verify=settings.verify)
    say(f"imported {len(report.imported)} saved objects into {report.url}:")
    for kind, object_id, title in report.imported:
        say(f"  {kind:<14} {object_id:<32} {title}")
    for url in report.dashboards:
        say(f"open {url}")
    if report.errors:
        raise click.ClickException(f"{len(report.errors)} saved objects were not imported: " + "; ".join(report.errors))
