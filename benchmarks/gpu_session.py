"""What does a session on the project's lent GPU machine carry there, run, and bring back, within its limits?

Issue 52's GPU work, planned here so that device time goes to the GPU alone.

That machine reaches no node, model hub or Maven Central. A call carries the working tree and the paths ``carry``
names, 64 MiB in all, and brings back from ``$OUT`` at most 8 files of 16 MiB; a task has 15 minutes of device
time, a machine's start included, and a call at most 10. So everything a call needs is packed here first, the call
runs one command that keeps to a time budget and leaves its results in few files, and they are read here:

    python -m benchmarks.gpu_session pack --base bge-small-en-v1.5 --training gpu-in/unseen.training.xz
    #   the device call: carry ["gpu"], with the command and the moves pack prints
    python -m benchmarks.gpu_session collect FILES_AT                 # the folder the device tool names

``pack`` writes ``gpu/`` (git ignores it): each base encoder as the sentence-transformers folder biorank converts
from its Maven graph, its weights as bf16 safetensors under xz (one base a call, and the shipped weights stay
behind: two such files do not fit); SciFact's corpus and claims; the prepared training; wheels of what the GPU
image lacks. It adds up what the call carries and refuses a plan over the limit. ``run`` (there) unpacks each
base into biorank's cache under the name it runs by, and does the parts asked for, in order, each within what is
left of ``--budget``:

- ``train``: each candidate of :data:`CANDIDATES` whose base travelled, from the prepared training;
- ``weights``: the candidate best on the unseen dev queries, as bf16 under xz, in pieces of at most 16 MiB (one
  candidate a call: two would not fit in what comes back);
- ``figures``: ``benchmarks/gpu_stages.py --outputs`` over all of SciFact with a few batch sizes, reranking with
  that candidate (the shipped model's architecture) or the shipped model where it travelled;
- ``encode``: ``biorank encode`` of SciFact without sentences, shards to load here with ``index --vectors``, in a
  call without training (the shards and a candidate's weights do not both fit in what comes back).

``collect`` unpacks what came back into ``gpu-back/`` and prints the commands that finish each part here: the
quality comparison with ONNX Runtime fp32, the shards loaded and compared, the candidate scored over the dev sets'
hybrid top 20 (here: the CPU's ms; the GPU's are the figures' rerank p50). ``run --device cpu --precision fp32
--smoke`` rehearses a call on this machine in two minutes: a failure found here costs no device time.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks import suite

GPU = suite.ROOT / "gpu"
"""What a call carries (``carry: ["gpu"]``); ``.git/info/exclude`` names it."""
BACK = suite.ROOT / "gpu-back"
"""Where ``collect`` unpacks what came back: beside ``gpu/``, not in it, so that no call carries it again."""
CALL_LIMIT = 64 * 2**20
"""What one call carries, the working tree included."""
PIECE = 16 * 10**6
"""A piece of what comes back: under the 16 MiB a file may have."""
MOVED_OUT = ("biorank/models/reranker/model.bf16.safetensors.xz", "biorank/models/metric/vocabulary.npz")
"""Tracked files a call with a base leaves behind: the shipped weights (a base and they do not fit together) and
the snippet metric's vocabulary, which no part uses."""
WHEELS = ("ir-measures==0.4.3", "pytrec-eval-terrier==0.5.11")
"""What the GPU image lacks that training's validation imports (the image's list: the device tool's KINDS.md)."""
CANDIDATES = (
    ("bge-hybrid", "bge-small-en-v1.5", ()),
    ("bge-hybrid-less", "bge-small-en-v1.5", ("--positive-repeats", "2", "--sentence-dropout", "0.1")),
    ("e5-hybrid", "e5-small-v2", ()),
)
"""The candidates of issue 52, item 2: the hybrid-negatives recipe from bge-small, the same with less memorising,
and one from a second base for an ensemble; each trains where its base travelled."""
PREFLIGHT = """
import torch, transformers
from biorank.models.placement import resolve_device
print("torch", torch.__version__, "CUDA", torch.version.cuda, "transformers", transformers.__version__,
      "device", resolve_device("auto"), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
"""
"""What every part needs, imported before any of them spends device time, with what training's validation imports
where a call trains (it would fail only after the first epoch)."""
VALIDATION = "import ir_measures, pytrec_eval\n"
TRAINING = ("--groups-per-step", "8", "--trim-groups", "--epochs", "2")
RESERVED = {"weights": 30, "figures": 120, "encode": 60}
"""Seconds the parts after training are planned to take on the GPU machine (the figures: model loads, three encoder
passes over SciFact, 50 claims timed four ways), which training leaves them."""
SMOKE_TRAINING = ("--groups-per-step", "2", "--max-steps", "2", "--max-length", "48")


def pack(args: argparse.Namespace) -> None:
    """Here: ``gpu/`` for one call, and the call's size against the limit."""
    from safetensors.torch import load_file

    from biorank.models.catalogue import MAVEN_MODELS, TORCH_FOLDER_KIND, torch_folder
    from biorank.models.shipped import pack_weights

    out = args.out
    out.mkdir(exist_ok=True)
    _exclude(out)
    # gpu/ is one call's: what an earlier pack left there and this one does not name would travel too.
    for stale in [p for p in (out / "base").glob("*") if p.name not in args.base]:
        shutil.rmtree(stale)
    for name in args.base:
        folder, target, model = torch_folder(MAVEN_MODELS[name]), out / "base" / name, MAVEN_MODELS[name]
        cached = {"identity": model.identity, "kind": TORCH_FOLDER_KIND}
        if (target / "cache.json").is_file() and json.loads((target / "cache.json").read_text()) == cached:
            continue
        print(f"{name}: its weights as bf16 under xz (a minute) ...", flush=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(folder, target, ignore=shutil.ignore_patterns("model.safetensors"))
        (target / "model.bf16.safetensors.xz").write_bytes(pack_weights(load_file(folder / "model.safetensors")))
        (target / "cache.json").write_text(json.dumps(cached))
    data = out / "data"
    data.mkdir(exist_ok=True)
    for source in (suite.data("scifact-corpus"), suite.data("scifact-claims-train")):
        (data / f"{source.name}.xz").write_bytes(lzma.compress(source.read_bytes(), preset=9))
    (out / "training.xz").unlink(missing_ok=True)
    shutil.rmtree(out / "wheels", ignore_errors=True)
    if args.training:
        shutil.copy(args.training, out / "training.xz")
        platforms = [f"--platform=manylinux_{glibc}_x86_64" for glibc in ("2_28", "2_24", "2_17")]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(out / "wheels"),
                        *WHEELS], check=True)
    tree, left = _tree_bytes(args.leave)
    packed = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    total = tree + packed
    print(f"the call carries {total / 2**20:.1f} MiB of {CALL_LIMIT / 2**20:.0f}: the tree {tree / 2**20:.1f} "
          f"(without {', '.join(left) or 'nothing'}), {out.name}/ {packed / 2**20:.1f}")
    if total > CALL_LIMIT:
        sys.exit(f"over the limit by {(total - CALL_LIMIT) / 2**20:.1f} MiB: pack less (one --base a call) or "
                 "leave more behind (--leave)")
    moves = [f"mv {p} /tmp/{Path(p).name}" for p in left]
    print("before the call: " + ("; ".join(moves) or "nothing to move") + "\nthe device call: carry [\"gpu\"], "
          "command: PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_session run --parts "
          f"{','.join(_parts_for(out))}\nafter it: " + ("; ".join(f"mv /tmp/{Path(p).name} {p}" for p in left)
                                                          or "nothing to move back"))


def _exclude(out: Path) -> None:
    """Git ignores ``out`` (inside the checkout), so that it travels only where a call carries it."""
    exclude = suite.ROOT / ".git" / "info" / "exclude"
    line = f"/{out.relative_to(suite.ROOT)}/"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    if line not in (exclude.read_text().splitlines() if exclude.is_file() else []):
        with exclude.open("a") as f:
            f.write(line + "\n")


def _tree_bytes(leave: list[str]) -> tuple[int, list[str]]:
    """What the device tool sends of the tree (tracked files and untracked ones git does not ignore), without the
    files to be moved out for the call; and those files."""
    listed = subprocess.run(["git", "-C", str(suite.ROOT), "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    left = [p for p in listed if p in leave]
    return sum((suite.ROOT / p).stat().st_size for p in listed if p and p not in left
               and (suite.ROOT / p).is_file()), left


def _parts_for(out: Path) -> list[str]:
    """The parts a call of this ``gpu/`` does: training where a candidate's base and the training travelled, with
    the figures where that base is the default encoder's; the encoding where it travelled without training."""
    from biorank.models.encoder import DEFAULT_MODEL

    bases = {p.name for p in (out / "base").iterdir()} if (out / "base").is_dir() else set()
    trains = (out / "training.xz").is_file() and any(base in bases for _, base, _ in CANDIDATES)
    encodes = DEFAULT_MODEL in bases
    # A candidate's weights and SciFact's shards do not both fit in what comes back (benchmarks/README.md): the
    # encoding goes in a call of its own, without training.
    return [part for part, wanted in (("train", trains), ("weights", trains), ("figures", encodes and trains),
                                      ("encode", encodes and not trains)) if wanted]


class Call:
    """One call's run there: its folders, its log, its deadline, and the parts that failed."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.deadline = args, time.monotonic() + args.budget
        self.work, self.out = args.work, args.out
        self.stage = self.work / "results"
        for folder in (self.work, self.out, self.stage):
            folder.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / "session.log").open("a", encoding="utf-8")
        self.env = {**os.environ, "BIORANK_CACHE": str(self.work / "cache"), "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(suite.ROOT), str(self.work / "site"),
                                                                os.environ.get("PYTHONPATH")]))}
        self.failed: list[str] = []
        self.trained: list[Path] = []
        self.returned: Path | None = None

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def step(self, what: str, command: list[str], limit: float | None = None) -> bool:
        """One command, its output into the log, stopped after ``limit`` seconds or where the budget ends (a few
        seconds are kept for what comes back)."""
        left = min(self.deadline - time.monotonic() - 15, limit or float("inf"))
        if left < 30:
            self.say(f"-- {what}: skipped, {max(left, 0):.0f} s left for it")
            self.failed.append(what)
            return False
        self.say(f"-- {what}: {shlex.join(command)}")
        started = time.monotonic()
        try:
            done = subprocess.run(command, env=self.env, cwd=suite.ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                  timeout=left)
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        self.log.flush()
        self.say(f"-- {what}: {'done' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
        if not ok:
            self.failed.append(what)
        return ok


def run(args: argparse.Namespace) -> None:
    """There: unpack, then each part in order within the budget; what comes back is in ``$OUT``."""
    call = Call(args)
    call.say(f"parts {','.join(args.parts)} on {args.device}, budget {args.budget} s" + (" (smoke)" if args.smoke
                                                                                          else ""))
    _unpack_bases(call)
    if (GPU / "wheels").is_dir():
        call.step("wheels", [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                             "--target", str(call.work / "site"), *map(str, sorted((GPU / "wheels").glob("*.whl")))])
    call.step("preflight", [sys.executable, "-c", (VALIDATION if "train" in args.parts else "") + PREFLIGHT])
    data = call.work / "data"
    data.mkdir(exist_ok=True)
    for packed in (GPU / "data").glob("*.xz"):
        (data / packed.stem).write_bytes(lzma.decompress(packed.read_bytes()))
    for part in args.parts if "preflight" not in call.failed else []:
        PARTS[part](call, data)
    with tarfile.open(call.out / "results.tar.gz", "w:gz") as tar:
        tar.add(call.stage, arcname="results")
    files = [p for p in call.out.rglob("*") if p.is_file()]
    if len(files) > 8 or sum(p.stat().st_size for p in files) > CALL_LIMIT or \
            any(p.stat().st_size > 16 * 2**20 for p in files):
        call.say(f"over what comes back: {len(files)} files, " + ", ".join(
            f"{p.relative_to(call.out)} {p.stat().st_size / 2**20:.1f} MiB" for p in files))
        call.failed.append("what comes back")
    call.say("failed: " + ", ".join(call.failed) if call.failed else "every part done")
    call.log.close()
    sys.exit(1 if call.failed else 0)


def _unpack_bases(call: Call) -> None:
    from biorank.models.runtime import cache_folder
    from biorank.models.shipped import unpack_weights

    os.environ["BIORANK_CACHE"] = call.env["BIORANK_CACHE"]
    for base in sorted((GPU / "base").glob("*")) if (GPU / "base").is_dir() else []:
        cached = json.loads((base / "cache.json").read_text())
        target = cache_folder(cached["identity"], cached["kind"])
        if not (target / "model.safetensors").is_file():
            shutil.copytree(base, target, ignore=shutil.ignore_patterns("*.xz", "cache.json"), dirs_exist_ok=True)
            unpack_weights((base / "model.bf16.safetensors.xz").read_bytes(), target / "model.safetensors")
        call.say(f"{base.name}: unpacked into the cache as {cached['identity']}")


def _train(call: Call, _data: Path) -> None:
    """Each candidate whose base travelled, each given an equal share of the time the parts after it leave, so
    that one slower than planned cannot take the others' (a candidate stopped short is lost, its epochs too)."""
    wanted = [c for c in CANDIDATES if (GPU / "base" / c[1]).is_dir() and (GPU / "training.xz").is_file()]
    after = sum(RESERVED.get(part, 0) for part in call.args.parts[call.args.parts.index("train") + 1:])
    for i, (name, base, extra) in enumerate(wanted):
        out = call.work / name
        recipe = SMOKE_TRAINING if call.args.smoke else TRAINING
        share = (call.deadline - time.monotonic() - 15 - after) / (len(wanted) - i)
        if call.step(f"train {name}", [sys.executable, "-m", "biorank.cli", "train-reranker", "--prepared",
                                       str(GPU / "training.xz"), "--base-model", base, "--out", str(out),
                                       "--device", call.args.device, "--no-store", *recipe, *extra], limit=share):
            call.trained.append(out)
            shutil.copy(out / "training.json", call.stage / f"{name}.training.json")


def best_candidate(trained: list[Path]) -> Path:
    """The trained candidate whose best epoch is best on the unseen dev queries (the dev split's where none)."""
    from biorank.training.loop import chosen

    return max(trained, key=lambda model: max(map(chosen, json.loads((model / "training.json").read_text())
                                                      ["history"])))


def _weights(call: Call, _data: Path) -> None:
    from safetensors.torch import load_file

    from biorank.models.shipped import pack_weights, unpack_weights

    if not call.trained:
        call.say("-- weights: no candidate was trained")
        call.failed.append("weights")
        return
    best = best_candidate(call.trained)
    with tarfile.open(call.work / "weights.tar", "w", dereference=True) as tar:
        for path in sorted(best.iterdir()):
            if path.is_file() and path.name != "model.safetensors" and path.suffix != ".onnx":
                tar.add(path, arcname=f"{best.name}/{path.name}")
        packed = call.work / "model.bf16.safetensors.xz"
        packed.write_bytes(pack_weights(load_file(best / "model.safetensors"), preset=0))
        tar.add(packed, arcname=f"{best.name}/{packed.name}")
    with (call.work / "weights.tar").open("rb") as f:
        pieces = list(iter(lambda: f.read(PIECE), b""))
    for i, piece in enumerate(pieces):
        (call.out / f"{best.name}.tar.{i}").write_bytes(piece)
    # The figures rerank with the weights as they come back, so that here ONNX Runtime compares the same model.
    call.returned = call.work / "returned" / best.name
    shutil.copytree(best, call.returned, ignore=shutil.ignore_patterns("model.safetensors", "*.onnx"),
                    dirs_exist_ok=True)
    unpack_weights(packed.read_bytes(), call.returned / "model.safetensors")
    call.say(f"-- weights: {best.name}, the best on the unseen dev, in {len(pieces)} pieces")


def _figures(call: Call, data: Path) -> None:
    from biorank.models.shipped import SHIPPED_FOLDER, SHIPPED_RERANKER, WEIGHTS

    if call.trained:
        reranker = str(call.returned or best_candidate(call.trained))
    elif (SHIPPED_FOLDER / WEIGHTS).is_file():
        reranker = SHIPPED_RERANKER
    else:
        call.say("-- figures: no cross-encoder (the shipped weights stayed behind and no candidate was trained)")
        call.failed.append("figures")
        return
    sizes = ["--limit", "24", "--queries", "2", "--quality-limit", "4", "--batch", "8", "--batch-tokens", "512,1024"] \
        if call.args.smoke else ["--limit", "0", "--batch-tokens", call.args.batch_tokens]
    call.step("figures", [sys.executable, "-m", "benchmarks.gpu_stages", "--device", call.args.device,
                          "--precision", call.args.precision,
                          "--corpus", str(data / "corpus.jsonl"), "--claims", str(data / "claims_train.jsonl"),
                          "--reranker", reranker, *sizes, "--outputs", str(call.stage / "gpu_stages.npz"),
                          "--notes", "The encoder's weights travelled as bf16 (its linear layers run in bf16 "
                          f"under autocast anyway); reranking with {Path(reranker).name}."])


def _encode(call: Call, data: Path) -> None:
    corpus = data / "corpus.jsonl"
    if call.args.smoke:
        corpus = data / "corpus-smoke.jsonl"
        with (data / "corpus.jsonl").open(encoding="utf-8") as f:
            corpus.write_text("".join(next(f) for _ in range(40)), encoding="utf-8")
    # Two shards that come back as files of their own, each under 16 MiB (4,096 abstracts without sentences are
    # not); with their empty sentence files and the manifest, 5 of the 8 files a call returns.
    call.step("encode", [sys.executable, "-m", "biorank.cli", "encode", str(corpus), "--out",
                         str(call.out / "vectors"), "--no-sentences", "--device", call.args.device,
                         "--precision", call.args.precision, "--shard-size", "3072", "--batch-size", "256"])


PARTS = {"train": _train, "weights": _weights, "figures": _figures, "encode": _encode}


def collect(args: argparse.Namespace) -> None:
    """Here: what came back, unpacked into ``gpu-back/``, and the commands that finish each part."""
    from benchmarks.gpu_stages import short_name

    came, back = args.files, args.out
    back.mkdir(parents=True, exist_ok=True)
    if back.resolve().is_relative_to(suite.ROOT):
        _exclude(back.resolve())
    shutil.copy(came / "session.log", back / "session.log")
    if (came / "results.tar.gz").is_file():
        with tarfile.open(came / "results.tar.gz") as tar:
            tar.extractall(back, filter="data")
    results, model = back / "results", None
    pieces = sorted(came.glob("*.tar.[0-9]*"), key=lambda p: int(p.suffix[1:]))
    if pieces:
        from biorank.models.shipped import unpack_weights

        with (back / "weights.tar").open("wb") as f:
            for piece in pieces:
                f.write(piece.read_bytes())
        with tarfile.open(back / "weights.tar") as tar:
            tar.extractall(back, filter="data")
        model = back / pieces[0].name.split(".tar.")[0]
        unpack_weights((model / "model.bf16.safetensors.xz").read_bytes(), model / "model.safetensors")
        print(f"the candidate: {model}")
    # The preflight's line names the GPU ("torch 2.11.0 CUDA 13.0 ... device cuda NVIDIA H200"): the records' variant.
    log = (back / "session.log").read_text(encoding="utf-8").splitlines()
    print("there: " + log[-1])
    variant = short_name(next((line for line in log if line.startswith("torch ")), ""))
    commands = []
    if (results / "gpu_stages.npz").is_file():
        commands.append(["python", "-m", "benchmarks.gpu_stages", "--compare", str(results / "gpu_stages.npz"),
                         *(["--reranker", str(model)] if model else [])])
    if (came / "vectors").is_dir():
        shutil.copytree(came / "vectors", back / "vectors", dirs_exist_ok=True)
    if (back / "vectors").is_dir():
        corpus = str(suite.data("scifact-corpus"))
        commands += [["biorank", "index", corpus, "--index", "carried-here", "--no-sentences"],
                     ["biorank", "index", corpus, "--index", f"carried-{variant}", "--no-sentences", "--vectors",
                      str(back / "vectors")],
                     ["python", "-m", "benchmarks.studies.carried_vectors", "--here", "carried-here", "--there",
                      f"carried-{variant}", "--variant", variant]]
    if model:
        scored = back / f"{model.name}.scores.json"
        commands += [["python", "-m", "benchmarks.studies.ensembles", "score", "ensembles.json.gz", "--reranker",
                      "biorank-reranker", "--name", "v2", "--out", "v2.json"],
                     ["python", "-m", "benchmarks.studies.ensembles", "score", "ensembles.json.gz", "--reranker",
                      str(model), "--name", model.name, "--out", str(scored)],
                     ["python", "-m", "benchmarks.studies.ensembles", "report", "ensembles.json.gz", "v2.json",
                      str(scored), "--alone", str(scored)]]
    print("here, to finish:\n" + "\n".join("  " + shlex.join(c) for c in commands))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_session", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("pack", help="here: gpu/ for one call, checked against the limit")
    p.add_argument("--base", action="append", default=[], help="a base encoder by name (bge-small-en-v1.5, ...)")
    p.add_argument("--training", type=Path, help="`biorank train-reranker --prepare-only`'s file")
    p.add_argument("--leave", nargs="*", default=list(MOVED_OUT), help="tracked files moved out for the call")
    p.add_argument("--out", type=Path, default=GPU)
    p = steps.add_parser("run", help="there: the parts in order, within the budget; results into --out")
    p.add_argument("--parts", type=lambda s: s.split(","), default=None,
                   help=f"of {','.join(PARTS)}, comma-separated (default: those pack planned for gpu/)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", default="auto", help="the models' (auto: bf16 on a GPU; a rehearsal on a CPU "
                   "takes fp32, as ONNX Runtime would need the graphs the GPU machine lacks)")
    p.add_argument("--budget", type=int, default=540, help="seconds for the whole call (the tool allows 600)")
    p.add_argument("--batch-tokens", default="8192,16384,32768", help="the encoder's batch sizes to compare")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: rehearse the call on a CPU")
    p.add_argument("--work", type=Path, default=Path("/tmp/biorank-gpu"))
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "/tmp/biorank-gpu-out"))
    p = steps.add_parser("collect", help="here: unpack what came back, and print what finishes each part")
    p.add_argument("files", type=Path, help="the folder the device tool's files_at names")
    p.add_argument("--out", type=Path, default=BACK)
    args = parser.parse_args(argv)
    if args.step == "pack" and not args.base:
        parser.error("name the base a call trains or encodes with: --base bge-small-en-v1.5 (or e5-small-v2)")
    if args.step == "run":
        args.parts = args.parts or _parts_for(GPU)
        if unknown := set(args.parts) - PARTS.keys():
            parser.error(f"unknown parts {', '.join(sorted(unknown))}: choose from {', '.join(PARTS)}")
    {"pack": pack, "run": run, "collect": collect}[args.step](args)


if __name__ == "__main__":
    main()
