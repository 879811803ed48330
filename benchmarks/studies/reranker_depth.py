"""How deep a model and how wide a window does the cross-encoder need: the shipped model in fewer layers?

Issue 16 asks for the reranker's depth and window chosen by measured quality against latency, and issues 15/16
for a rerank of 20 hits within 120 ms on a 2-core AVX2 CPU, where the shipped 12-layer model at 256 word pieces
takes 1.6 s in int8. A student is the shipped model's first L layers and its head, trained on the supervision's
groups (1 positive + up to 31 BM25 negatives, :func:`~biorank.training.supervision.training_pairs`) either with
listwise KL to the shipped model's softmax over each group (``kl``: distillation, its logits at 256 pieces) or
with softmax cross-entropy on the hard label (``ce``: the shipped recipe's loss). Four steps on two machines:

    python -m benchmarks.studies.reranker_depth prepare --supervision supervision --out depth.json.gz   # the node
    python -m benchmarks.studies.reranker_depth distil depth.json.gz --out runs   # a GPU: torch + transformers only
    python -m benchmarks.studies.reranker_depth report depth.json.gz runs/results.json --variant students
    python -m benchmarks.studies.reranker_depth latency --layers 1,2,4,6,12 --lengths 128,256   # the CPU it is for

``prepare`` needs ``biorank gather-supervision ../shared/data --out supervision`` and three indices: SciFact
(all of ``corpus.jsonl``), the BioASQ 7B abstracts and NFCorpus dev docs; each query set's hybrid top 20 are the
candidates (SciFact's dev claims, BEIR qrels; the 240 fully covered 7B questions; 324 NFCorpus dev queries),
none of them trained on. ``distil`` reads nothing but that file and the shipped weights, so it runs on a GPU
machine that cannot reach a node. ``report`` and ``latency`` write records; ``report`` also prints each set's
ceiling: the candidates in the best order (judged first).

The wider windows, MaxP and the shipped model trained further on PubMed questions:

    python -m benchmarks.studies.reranker_depth distil depth.json.gz --out windows --runs L12:ce:512:2 \\
        --learning-rate 2e-5 --groups-per-step 8 --trim-groups --windows 384 --maxp
    python -m benchmarks.studies.reranker_depth distil depth.json.gz --out pubmed --runs L12:ce:256:2 \\
        --learning-rate 2e-5 --groups-per-step 8 --trim-groups --groups snippet,pmid

Decisions (records ``reranker_depth-*.json``, 2026-11-26/27): nothing within 120 ms on 2 AVX2 cores reranks
(1- and 2-layer students order worse than the first stage alone); 6 layers at 256 pieces halve the cost within
noise of the shipped model, but a new version is committed only when measurably better; the 256-piece window is
not what holds the reranker back, nor the share of BioASQ in training.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import os
import random
import sys
import time
from pathlib import Path

from benchmarks import suite

DATA = suite.DATA
SHIPPED = suite.ROOT / "biorank" / "models" / "reranker"
SETS = ("scifact", "bioasq", "nfcorpus")
MEASURE = {"scifact": "ndcg@10", "bioasq": "map@10", "nfcorpus": "ndcg@10"}
WEIGHTS = (1.0, 0.3, 0.5, 0.7)
DEFAULT_RUNS = "L6:kl:256:3,L4:kl:256:5,L4:kl:128:6,L2:kl:128:6,L2:ce:128:6,L1:kl:128:6"


def prepare(args: argparse.Namespace) -> None:
    from biorank.training.supervision import read, training_pairs

    pairs = [p for p in training_pairs(read(args.supervision), positives_per_query=2, negatives=31,
                                       seed=args.seed, shares={"nfcorpus": 0.25}) if p.negatives]
    texts, groups = {}, []
    for p in pairs:
        for passage in (p.positive, *p.negatives):
            texts[passage.id] = passage.text
        groups.append({"q": p.query.text, "ids": [p.positive.id, *(n.id for n in p.negatives)]})
    evals = candidates(args)
    with gzip.open(args.out, "wt", compresslevel=9) as f:
        json.dump({"texts": texts, "groups": groups, "evals": evals}, f)
    print(f"{len(groups)} training groups, {sum(len(g['ids']) for g in groups)} pairs -> {args.out}")


def candidates(args: argparse.Namespace) -> list[dict]:
    """Each dev query's hybrid top 20 from ``args``' three indices, with texts, first-stage scores and judgements
    (shared with ``benchmarks/studies/ensembles.py``)."""
    from benchmarks.studies.encoder_choice import bioasq7b
    from biorank import Searcher
    from biorank.evaluation.splits import split_judged
    from biorank.evaluation.topics import read_qrels, read_queries
    from biorank.stages.rerank import fetch_texts

    scifact_queries = read_queries(DATA / "scifact/queries_train.jsonl")
    scifact_qrels = read_qrels(DATA / "scifact/qrels/train.tsv")
    nf_queries, nf_qrels = (read_queries(DATA / "nfcorpus/dev.titles.queries"),
                            read_qrels(DATA / "nfcorpus/dev.2-1-0.qrel"))
    sets = {
        "scifact": (args.scifact_index, {q: scifact_queries[q] for q in split_judged(scifact_qrels, "dev")},
                    scifact_qrels),
        "bioasq": (args.bioasq_index, *bioasq7b()),
        "nfcorpus": (args.nfcorpus_index, {q: nf_queries[q] for q in nf_qrels if q in nf_queries}, nf_qrels),
    }
    client = suite.connect(args)
    evals = []
    for name, (index, queries, qrels) in sets.items():
        hits = Searcher.open(client, index).search_many(queries, 20)
        texts_of = fetch_texts(client, index, sorted({h.id for ranked in hits.values() for h in ranked}))
        evals += [{"set": name, "qid": q, "q": queries[q], "ids": [h.id for h in ranked],
                   "first": [h.score for h in ranked], "texts": [texts_of[h.id] for h in ranked],
                   "qrels": qrels.get(q, {})} for q, ranked in hits.items()]
        print(f"{name}: {len(hits)} queries from {index}", flush=True)
    return evals


def distil(args: argparse.Namespace) -> None:
    """The GPU step: only torch, transformers and safetensors, no biorank (its machine may lack the rest)."""
    import lzma

    import numpy as np
    import torch
    from safetensors.torch import load, save
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    started = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = device.type == "cuda"
    with gzip.open(args.data, "rt") as f:
        data = json.load(f)
    texts, groups, evals = data["texts"], data["groups"], data["evals"]
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    with lzma.open(SHIPPED / "model.bf16.safetensors.xz") as packed:
        teacher_state = {k: v.float() for k, v in load(packed.read()).items()}
    results: dict = {"models": {}, "epochs": {}}

    def say(*words: object) -> None:
        print(f"[{time.time() - started:6.1f} s]", *words, flush=True)

    def model_of(layers: int):
        config = AutoConfig.from_pretrained(SHIPPED)
        config.num_hidden_layers = layers
        model = AutoModelForSequenceClassification.from_config(config)
        model.load_state_dict({k: v for k, v in teacher_state.items() if not k.startswith("bert.encoder.layer.")
                               or int(k.split(".")[3]) < layers}, strict=False)
        return model.to(device)

    def encode(queries: list[str], docs: list[str], length: int) -> tuple[list, list]:
        enc = tokenizer(queries, docs, truncation="longest_first", max_length=length)
        return enc["input_ids"], enc["token_type_ids"]

    def tensors(ids: list, types: list):
        batch = torch.zeros((len(ids), max(len(x) for x in ids)), dtype=torch.long)
        segments, mask = torch.zeros_like(batch), torch.zeros_like(batch)
        for i, (x, y) in enumerate(zip(ids, types, strict=True)):
            batch[i, : len(x)], segments[i, : len(y)], mask[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
        return {"input_ids": batch.to(device), "token_type_ids": segments.to(device),
                "attention_mask": mask.to(device)}

    def logits_of(model, inputs):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            return model(**inputs).logits[:, 0].float()

    @torch.no_grad()
    def score(model, ids: list, types: list) -> np.ndarray:
        model.eval()
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        scores = np.zeros(len(ids), dtype=np.float32)
        for s in range(0, len(order), 1024):
            chosen = order[s : s + 1024]
            scores[chosen] = logits_of(model, tensors([ids[i] for i in chosen], [types[i] for i in chosen])).cpu()
        model.train()
        return scores

    eval_pairs = ([e["q"] for e in evals for _ in e["texts"]], [t for e in evals for t in e["texts"]])
    eval_tokens: dict[int, tuple] = {}

    def keep(name: str, length: int, scores: np.ndarray) -> None:
        results["models"][name] = {"length": length, "scores": [round(float(x), 5) for x in scores]}
        (out / "results.json").write_text(json.dumps(results))

    def record(name: str, model, length: int) -> None:
        if length not in eval_tokens:
            eval_tokens[length] = encode(*eval_pairs, length)
        keep(name, length, score(model, *eval_tokens[length]))

    def record_maxp(model) -> None:
        """MaxP (Dai & Callan): each text cut into 256-piece windows a half window apart, its best window's score."""
        queries = tokenizer(eval_pairs[0], add_special_tokens=False, truncation=True, max_length=64)["input_ids"]
        documents = tokenizer(eval_pairs[1], add_special_tokens=False)["input_ids"]
        ids, types, owner = [], [], []
        for pair, (q, d) in enumerate(zip(queries, documents, strict=True)):
            room = 256 - 3 - len(q)
            begins = [0]
            while begins[-1] + room < len(d):
                begins.append(begins[-1] + room // 2)
            for begin in begins:
                window = d[begin : begin + room]
                ids.append([tokenizer.cls_token_id, *q, tokenizer.sep_token_id, *window, tokenizer.sep_token_id])
                types.append([0] * (len(q) + 2) + [1] * (len(window) + 1))
                owner.append(pair)
        best = np.full(len(queries), -np.inf, dtype=np.float32)
        np.maximum.at(best, np.array(owner), score(model, ids, types))
        keep("L12-shipped-maxp256", 256, best)
        say(f"MaxP: {len(ids)} windows of {len(queries)} pairs")

    runs = [r for r in args.runs.split(",") if r]
    teacher = model_of(12)
    windows = {256, *(int(r.split(":")[2]) for r in runs), *(int(w) for w in args.windows.split(",") if w)}
    for length in sorted(windows, reverse=True):
        record(f"L12-shipped-{length}", teacher, length)
    if args.maxp:
        record_maxp(teacher)
    widths = [len(g["ids"]) for g in groups]
    starts = np.cumsum([0, *widths])
    train_pairs = ([g["q"] for g in groups for _ in g["ids"]], [texts[i] for g in groups for i in g["ids"]])
    train_tokens = {256: encode(*train_pairs, 256)}
    labels = score(teacher, *train_tokens[256])
    del teacher
    say(f"the shipped model labelled {len(labels)} training pairs at 256 word pieces")

    visited = groups_visited(groups, args.groups)
    say(f"{len(visited)} groups visited an epoch ({args.groups})")
    for run in runs:
        layers, loss_kind, length, epochs = run.split(":")
        layers, length, epochs = int(layers.removeprefix("L")), int(length), int(epochs)
        name = f"L{layers}-{loss_kind}-{length}"
        if time.time() - started > args.budget:
            say(f"{name} left out: past the budget of {args.budget:.0f} s")
            continue
        if length not in train_tokens:
            train_tokens[length] = encode(*train_pairs, length)
        ids, types = train_tokens[length]
        torch.manual_seed(args.seed)
        shuffle = random.Random(args.seed)
        model = model_of(layers)
        model.train()
        total = math.ceil(len(visited) / args.groups_per_step) * epochs
        warm = max(1, total // 10)
        decayed = [p for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
        kept = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
        optimiser = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                                       {"params": kept, "weight_decay": 0.0}], lr=args.learning_rate)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, _warm_then_decay(warm, total))
        for epoch in range(1, epochs + 1):
            order = list(visited)
            shuffle.shuffle(order)
            for s in range(0, len(order), args.groups_per_step):
                chosen = order[s : s + args.groups_per_step]
                # --trim-groups cuts every group of the step to the step's narrowest (the shipped recipe's
                # step); otherwise groups of fewer texts are padded with -inf: nothing in their softmax.
                narrowest = min(widths[g] for g in chosen) if args.trim_groups else None
                kept_widths = [narrowest or widths[g] for g in chosen]
                rows = [starts[g] + j for g, width in zip(chosen, kept_widths, strict=True) for j in range(width)]
                logits = logits_of(model, tensors([ids[j] for j in rows], [types[j] for j in rows]))
                w = torch.tensor(kept_widths, device=device)
                present = torch.arange(int(w.max()), device=device) < w[:, None]
                student = torch.full(present.shape, float("-inf"), device=device)
                student[present] = logits
                if loss_kind == "ce":
                    loss = torch.nn.functional.cross_entropy(student, torch.zeros(len(chosen), dtype=torch.long,
                                                                                  device=device))
                else:
                    teacher_logits = torch.full_like(student, float("-inf"))
                    teacher_logits[present] = torch.tensor(labels[rows], device=device)
                    p_teacher, log_teacher = teacher_logits.softmax(1), teacher_logits.log_softmax(1)
                    terms = p_teacher * (log_teacher - student.log_softmax(1))
                    loss = torch.where(present, terms, torch.zeros_like(terms)).sum(1).mean()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimiser.step()
                schedule.step()
                optimiser.zero_grad(set_to_none=True)
            say(f"{name}: epoch {epoch} of {epochs}")
        record(name, model, length)
        state = {k: v.to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()
                 if "position_ids" not in k}
        (out / f"{name}.bf16.safetensors.xz").write_bytes(lzma.compress(save(state), preset=6))
    say(f"scores in {out / 'results.json'}")


def groups_visited(groups: list[dict], spec: str) -> list[int]:
    """The groups an epoch visits: ``all``; only those whose positive's id starts with one of the prefixes
    (``snippet,pmid``: BioASQ's snippets and abstracts and PubMedQA's); or ``all+`` them, those twice."""
    everything, _, prefixes = spec.partition("+") if spec.startswith("all") else ("", "", spec)
    chosen = [i for i, g in enumerate(groups) if prefixes and g["ids"][0].split(":")[0] in prefixes.split(",")]
    return [*(range(len(groups)) if everything else ()), *chosen]


def _warm_then_decay(warm: int, total: int):
    """The shipped recipe's schedule: linear warm-up over ``warm`` steps, then linear decay to 0 at ``total``."""
    return lambda step: min((step + 1) / warm, max(0.0, (total - step) / max(1, total - warm)))


def report(args: argparse.Namespace) -> None:
    """Every model against the shipped one at the same w, by biorank's own report (paired t-tests included)."""
    from biorank.evaluation.measures import run_from_hits
    from biorank.evaluation.report import SIGNIFICANCE_LEVEL, evaluate_runs
    from biorank.stages.rerank import reorder
    from biorank.types import Hit

    with gzip.open(args.data, "rt") as f:
        evals = json.load(f)["evals"]
    models: dict[str, list[float]] = {}
    for path in args.results:
        for name, result in json.loads(path.read_text())["models"].items():
            # Every call scores the shipped model again (the same scores); its runs may share a name with
            # another call's, so those are told apart by their folder.
            if models.get(name, result["scores"]) != result["scores"]:
                name = f"{name}@{path.parent.name}"
            models.setdefault(name, result["scores"])
    baseline = next(n for n in models if n.startswith("L12-shipped-256"))
    names = [baseline, *(n for n in models if n != baseline)]
    # Where each query's candidates start in a model's flat list of scores.
    starts = list(itertools.accumulate((len(e["ids"]) for e in evals), initial=0))
    # The ceiling of any reranker of these candidates: the judged ones first, by grade.
    grades = [float(e["qrels"].get(d, 0)) for e in evals for d in e["ids"]]

    def run(rows: list[tuple[dict, int]], scores: list[float] | None, weight: float) -> dict[str, dict[str, float]]:
        hits = {}
        for e, at in rows:
            ranked = enumerate(zip(e["ids"], e["first"], strict=True), 1)
            first = [Hit(id=d, title="", rank=r, score=s) for r, (d, s) in ranked]
            hits[e["qid"]] = first if scores is None else reorder(first, scores[at : at + len(first)], weight)
        return run_from_hits(hits)

    table: dict[str, dict] = {n: {"model": n} for n in names}
    for name_of_set in SETS:
        rows = [(e, at) for e, at in zip(evals, starts, strict=False) if e["set"] == name_of_set]
        qrels = {e["qid"]: e["qrels"] for e, _ in rows}
        measure = MEASURE[name_of_set]
        cells: dict[str, list[str]] = {n: [] for n in names}
        for weight in WEIGHTS:
            result = evaluate_runs({n: run(rows, models[n], weight) for n in names}, qrels, [measure])
            for n in names:
                p = result.p_values.get(n, {}).get(measure, 1.0)
                cells[n].append(f"{result.table[n][measure]:.4f}{'*' if p < SIGNIFICANCE_LEVEL else ''}")
                table[n][f"{name_of_set}_w{weight:g}"] = round(result.table[n][measure], 4)
                table[n][f"{name_of_set}_w{weight:g}_p"] = round(p, 4)
        bounds = evaluate_runs({"first": run(rows, None, 0.0), "best": run(rows, grades, 1.0)}, qrels, [measure])
        print(f"\n{name_of_set}, {measure} ({bounds.queries} queries; first stage "
              f"{bounds.table['first'][measure]:.4f}, its candidates in the best order "
              f"{bounds.table['best'][measure]:.4f}); w " + " / ".join(f"{w:g}" for w in WEIGHTS))
        for n in names:
            print(f"  {n:<20} " + " / ".join(cells[n]))
    ws = " / ".join(f"{w:g}" for w in WEIGHTS)
    cols = [suite.Column("model", "model"), *(
        suite.Column("+".join(f"{s}_w{w:g}" for w in WEIGHTS), f"{s} {MEASURE[s]} w {ws}", ".4f") for s in SETS)]
    suite.record(args, cols, list(table.values()), variant=args.variant,
                 settings={"weights": WEIGHTS, "significance": SIGNIFICANCE_LEVEL, "data": str(args.data),
                           "results": [str(r) for r in args.results]},
                 notes="each set's _p keys: paired t-test against the shipped model at 256 pieces, same w")


def latency(args: argparse.Namespace) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from biorank import CrossEncoder
    from biorank.models.shipped import shipped_reranker_folder

    corpus = [json.loads(line) for line in suite.data("scifact-corpus").open()][: 20 * args.queries]
    docs = [f"{d['title']} {' '.join(d['abstract'])}" for d in corpus]
    claims = [json.loads(line)["claim"] for line in suite.data("scifact-claims-train").open()][: args.queries]
    work = Path(args.work)
    rows = []
    for layers in (int(x) for x in args.layers.split(",")):
        folder = work / f"shipped-L{layers}"
        if not folder.is_dir():
            model = AutoModelForSequenceClassification.from_pretrained(shipped_reranker_folder())
            model.bert.encoder.layer = model.bert.encoder.layer[:layers]
            model.config.num_hidden_layers = layers
            model.save_pretrained(folder)
            AutoTokenizer.from_pretrained(shipped_reranker_folder()).save_pretrained(folder)
        for length in (int(x) for x in args.lengths.split(",")):
            for precision in args.precisions.split(","):
                scorer = CrossEncoder(folder, precision=precision, max_length=length)
                times = suite.timed(lambda i, s=scorer: s.score(claims[i], docs[20 * i : 20 * (i + 1)]),
                                    list(range(len(claims))), warm=1, repeat=3)
                rows.append({"layers": layers, "pieces": length, "precision": precision, **suite.summary(times)})
    suite.record(args, suite.columns(("layers", "layers"), ("pieces", "pieces"), ("precision", "precision"),
                                     ("p50", "20 pairs p50 ms", ",.0f"), ("p95", "p95 ms", ",.0f")),
                 rows, variant="latency", settings={"queries": args.queries, "pairs": 20})


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__)
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("prepare", help="training groups and eval candidates (needs the node and the indices)")
    p.add_argument("--supervision", type=Path, required=True, help="biorank gather-supervision's --out")
    p.add_argument("--scifact-index", default="scifact")
    p.add_argument("--bioasq-index", default="encoder-choice-bioasq7b-bge")
    p.add_argument("--nfcorpus-index", default="nfcorpus")
    p.add_argument("--seed", type=int, default=20261122)
    p.add_argument("--out", type=Path, required=True)
    p = steps.add_parser("distil", help="train the students and score the candidates (a GPU)")
    p.add_argument("data", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--runs", default=DEFAULT_RUNS, help="LAYERS:kl|ce:PIECES:EPOCHS, comma-separated.")
    p.add_argument("--groups-per-step", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=20261122)
    p.add_argument("--budget", type=float, default=float(os.environ.get("BUDGET", "inf")),
                   help="Seconds after which no further student is started.")
    p.add_argument("--trim-groups", action="store_true", help="Cut each step's groups to its narrowest group.")
    p.add_argument("--groups", default="all", help="all, PREFIXES (only groups whose positive id starts so) or "
                   "all+PREFIXES (those twice); PREFIXES comma-separated, e.g. snippet,pmid.")
    p.add_argument("--windows", default="", help="Further windows (word pieces) to score the shipped model at.")
    p.add_argument("--maxp", action="store_true", help="Also score the shipped model by its best 256-piece window.")
    p = steps.add_parser("report", help="the table: every model against the shipped one")
    p.add_argument("data", type=Path)
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--variant", default="report", help="the record's name: reranker_depth-VARIANT.json")
    p = steps.add_parser("latency", help="int8/fp32 latency of 20 pairs per depth and window on this CPU")
    p.add_argument("--layers", default="1,2,4,6,12")
    p.add_argument("--lengths", default="128,256")
    p.add_argument("--precisions", default="int8")
    p.add_argument("--queries", type=int, default=10)
    p.add_argument("--work", default="depth-models", help="Folder for the cut models.")
    args = parser.parse_args(argv)
    {"prepare": prepare, "distil": distil, "report": report, "latency": latency}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
