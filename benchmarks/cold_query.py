"""A fresh ``biorank query``, as a user at a terminal pays for it: the wall time of the whole process
(interpreter, imports, loading the query encoder, connecting, the requests, the table), N times per variant.

    python benchmarks/cold_query.py --index bioasq7b-bge --runs 10
    python benchmarks/cold_query.py --index bioasq7b-bge --mode hybrid --mode bm25
    # the code before a change against this checkout, alternated, each with its own model cache:
    git worktree add /tmp/before <rev>
    python benchmarks/cold_query.py --index bioasq7b-bge --variant before=/tmp/before:/tmp/before-cache \\
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

from machine import cpu_isa

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True)
    parser.add_argument("--url", default=None, help="The cluster (default: biorank's own, as the CLI finds it).")
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--runs", type=int, default=10, help="Measured runs per variant and mode.")
    parser.add_argument("--mode", action="append", default=None, help="Repeatable; default: hybrid.")
    parser.add_argument("--rerank", action="store_true", help="Every run also reranks (loads the cross-encoder).")
    parser.add_argument("--variant", action="append", type=variant, default=None,
                        help="label=checkout[:cache], repeatable; default: the biorank this Python imports.")
    options = parser.parse_args()
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
    print(f"{cpu_isa()}; index {options.index}{' with --rerank' if options.rerank else ''}; {options.runs} runs "
          "each, alternated")
    print("| variant | mode | p50 s | min s | max s |\n| --- | --- | ---: | ---: | ---: |")
    for (label, mode), seconds in times.items():
        print(f"| {label} | {mode} | {statistics.median(seconds):.2f} | {min(seconds):.2f} | {max(seconds):.2f} |")


if __name__ == "__main__":
    main()
