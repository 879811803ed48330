"""What does a fresh ``biorank query`` cost a user at a terminal: the wall time of the whole process?

Interpreter, imports, loading the query encoder, connecting, the requests, the table; N times per variant.

    python -m benchmarks.cold_query --index bioasq7b-bge --runs 10
    python -m benchmarks.cold_query --index bioasq7b-bge --mode hybrid --mode bm25
    # the code before a change against this checkout, alternated, each with its own model cache:
    git worktree add /tmp/before <rev>
    python -m benchmarks.cold_query --index bioasq7b-bge --variant before=/tmp/before:/tmp/before-cache \\
        --variant after=.:$HOME/.cache/biorank

Variants and modes alternate run by run, so that the machine's drift falls on all of them alike. One unmeasured
run per variant comes first: it writes the variant's bytecode and its model export (a cache made by another
version of biorank is made again), as an installed biorank has them. Python is told to write bytecode whatever
``PYTHONDONTWRITEBYTECODE`` says, because without it every run would compile biorank's sources again, which no
installed copy does. Every run logs nothing to the query log (``--no-log``); ``--rerank`` adds the cross-encoder
(the shipped one, or the index's own) to every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import suite

QUERY = "Is BRCA1 mutation associated with breast cancer risk?"


def variant(text: str) -> tuple[str, Path, Path | None]:
    """``label=checkout[:cache]``."""
    label, _, rest = text.partition("=")
    checkout, _, cache = rest.partition(":")
    if not label or not checkout:
        raise argparse.ArgumentTypeError(f"expected label=checkout[:cache], got {text!r}")
    return label, Path(checkout).resolve(), Path(cache).resolve() if cache else None


def one_run(checkout: Path | None, cache: Path | None, args: list[str]) -> float:
    """Seconds from starting a fresh ``python -m biorank.cli`` to its exit; a failed run stops the benchmark."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    if cache is not None:
        env["BIORANK_CACHE"] = str(cache)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "biorank.cli", *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"biorank query failed ({checkout or 'installed'}):\n{result.stderr[-2000:]}")
    return elapsed


COLUMNS = suite.columns(("variant", "variant"), ("mode", "mode"), ("p50", "p50 s", ".2f"), ("min", "min s", ".2f"),
                        ("max", "max s", ".2f"))


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, index="")
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--runs", type=int, default=10, help="Measured runs per variant and mode.")
    parser.add_argument("--mode", action="append", default=None, help="Repeatable; default: hybrid.")
    parser.add_argument("--rerank", action="store_true", help="Every run also reranks (loads the cross-encoder).")
    parser.add_argument("--variant", action="append", type=variant, default=None,
                        help="label=checkout[:cache], repeatable; default: the biorank this Python imports.")
    options = parser.parse_args(argv)
    if not options.index:
        parser.error("--index is required: the index the fresh queries ask")
    variants = options.variant or [("installed", None, None)]
    modes = options.mode or ["hybrid"]

    def command(mode: str) -> list[str]:
        return [*(["--url", options.url] if options.url else []), "query", options.query, "--index", options.index,
                "--mode", mode, "--no-log", *(["--rerank"] if options.rerank else [])]

    times: dict[tuple[str, str], list[float]] = {(label, mode): [] for label, *_ in variants for mode in modes}
    for _, checkout, cache in variants:
        one_run(checkout, cache, command(modes[0]))
    for _ in range(options.runs):
        for label, checkout, cache in variants:
            for mode in modes:
                times[label, mode].append(one_run(checkout, cache, command(mode)))
    suite.header(f"index {options.index}{' with --rerank' if options.rerank else ''}; {options.runs} runs "
                 "each, alternated")
    rows = [{"variant": label, "mode": mode, "p50": round(statistics.median(seconds), 3),
             "min": round(min(seconds), 3), "max": round(max(seconds), 3)} for (label, mode), seconds in times.items()]
    suite.record(options, COLUMNS, rows, variant="rerank" if options.rerank else None,
                 settings={"index": options.index, "runs": options.runs, "rerank": options.rerank,
                           "variants": {label: str(checkout or "installed") for label, checkout, _ in variants}})


if __name__ == "__main__":
    main()
