"""The manifest of a folder of vectors (``biorank encode``): what ``encode`` writes into ``manifest.json``, and the
check that a manifest is exactly that — every field's type and range, no field besides, every shard a plain file
name inside its folder, counts that add up — before anything is read on its word."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from biorank.errors import BiorankError
from biorank.indexer.blocks import block_budget

MANIFEST = "manifest.json"
LAYOUT = 1
"""The version of this folder layout: a reader refuses another."""
KINDS = ("blocks", "sentences")
"""The files of a shard: ``NAME.blocks.parquet`` and ``NAME.sentences.parquet``."""


class ShardMismatch(BiorankError):
    """Vectors that do not belong to this input, these settings or this index; or a folder that is not one."""


class _Field(NamedTuple):
    """One value of the manifest: what it must be, in words for the refusal, and the test."""

    kind: str
    accepts: Callable[[Any], bool]


class _Optional(NamedTuple):
    """A field that may be absent (present, it must conform)."""

    spec: Any


def _whole(least: int) -> _Field:
    # bool is an int to Python, never to JSON's writer here: true is not a count.
    return _Field(f"a whole number >= {least}", lambda v: type(v) is int and v >= least)


_TEXT = _Field("a string", lambda v: isinstance(v, str))
_TEXT_OR_NULL = _Field("a string or null", lambda v: v is None or isinstance(v, str))
_SHA256 = _Field("a SHA-256 in hex", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None)
_FILE = {"bytes": _whole(0), "sha256": _SHA256}
_COUNTS = {"documents": _whole(0), "blocks": _whole(0), "sentences": _whole(0)}
_SCHEMA = {
    "layout": _Field(str(LAYOUT), lambda v: type(v) is int and v == LAYOUT),
    "biorank": _TEXT,
    # The fields of ModelIdentity, which the reader builds from them.
    "model": {
        "name": _TEXT, "source": _TEXT, "dimension": _whole(1), "max_seq_length": _whole(3),
        "prompts": _Field("an object of strings", lambda v: isinstance(v, dict) and all(
            isinstance(x, str) for x in v.values())),
        "default_lambda": _Field("a number or null", lambda v: v is None or (
            type(v) in (int, float) and math.isfinite(v))),
    },
    "block_tokens": _whole(1),
    # The keys of reader_settings(), compared one by one with the run's.
    "reader": {
        "format": _TEXT, "id_field": _TEXT_OR_NULL, "title_field": _TEXT_OR_NULL, "text_field": _TEXT_OR_NULL,
        "max_record_bytes": _whole(1), "sentences": _Field("true or false", lambda v: isinstance(v, bool)),
        "batch_size": _whole(1),
    },
    "inputs": [{"name": _TEXT, "bytes": _whole(0), "sha256": _SHA256}],
    "shard_batches": _whole(1),
    # "files" (each file's size and SHA-256) is absent from the shards of a biorank that did not record them.
    "shards": [{"name": _TEXT, "batches": _whole(1), **_COUNTS, "files": _Optional(dict.fromkeys(KINDS, _FILE))}],
    "complete": _Field("true or false", lambda v: isinstance(v, bool)),
    "counts": _Optional(_COUNTS),  # required once complete
}
"""What ``encode`` writes into ``manifest.json``: each field's type and range, no field besides."""


def _shown(value: Any) -> str:
    """A value of the manifest as a refusal quotes it: JSON (control characters escaped), cut short."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 40 else f"{text[:40]}…"


def _problem(value: Any, spec: Any, where: str) -> str | None:
    """The first thing in ``value`` that does not conform to ``spec`` (:data:`_SCHEMA` or a part of it), in
    words, ``where`` being its place in the manifest; None when it conforms."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where} is {_shown(value)}, not an object"
        unknown = sorted(set(value) - set(spec))
        if unknown:
            return f"{where or 'the manifest'} has a field {_shown(unknown[0])} that `biorank encode` does not write"
        for key, part in spec.items():
            at = f"{where}.{key}" if where else key
            if key not in value:
                if isinstance(part, _Optional):
                    continue
                return f"{at} is missing"
            if problem := _problem(value[key], part.spec if isinstance(part, _Optional) else part, at):
                return problem
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} is {_shown(value)}, not a list"
        return next((p for n, item in enumerate(value) if (p := _problem(item, spec[0], f"{where}[{n}]"))), None)
    return None if spec.accepts(value) else f"{where} is {_shown(value)}, not {spec.kind}"


def _plain_name_problem(folder: Path, name: str) -> str | None:
    """Why the shard ``name`` could name a file outside ``folder`` (a path, ``..``, NUL, a link leading out), or
    None: its files are ``folder/NAME.KIND.parquet`` and nothing else."""
    if not name or "\0" in name or "/" in name or "\\" in name or ".." in name or Path(name).anchor:
        return "is not a plain file name"
    root = folder.resolve()
    for kind in KINDS:
        try:
            outside = (folder / f"{name}.{kind}.parquet").resolve().parent != root
        except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
            outside = True
        if outside:
            return f"leads outside the folder ({name}.{kind}.parquet is a link)"
    return None


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a folder of vectors, refused in one line (:class:`ShardMismatch`) when it is missing,
    unreadable, of another layout, or not as ``encode`` writes it: a field missing, unknown or of another type, a
    shard name that is not a plain file name inside ``folder``, counts that are not the sum of the shards'."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardMismatch(f"{folder} holds no {MANIFEST}: it is not a folder written by `biorank encode`") from None
    except (OSError, ValueError, RecursionError) as e:
        raise ShardMismatch(f"{path} cannot be read ({e}); encode again into a new folder") from None
    if not isinstance(manifest, dict) or _problem(manifest.get("layout"), _SCHEMA["layout"], "layout"):
        raise ShardMismatch(f"{path} is not of layout {LAYOUT}, which this biorank reads; encode again "
                            "with this version")

    def refuse(problem: str) -> ShardMismatch:
        return ShardMismatch(f"{path} is not as `biorank encode` writes it: {problem}; encode again into a new "
                             "folder")

    if problem := _problem(manifest, _SCHEMA, ""):
        raise refuse(problem)
    if manifest["block_tokens"] != block_budget(manifest["model"]["max_seq_length"]):
        raise refuse(f"block_tokens is {manifest['block_tokens']}, the window of {manifest['model']['max_seq_length']} "
                     f"word pieces gives {block_budget(manifest['model']['max_seq_length'])}")
    names = set()
    for n, shard in enumerate(manifest["shards"]):
        if problem := _plain_name_problem(folder, shard["name"]):
            raise refuse(f"shards[{n}].name {_shown(shard['name'])} {problem}")
        if shard["name"] in names:
            raise refuse(f"shards[{n}].name {_shown(shard['name'])} is given twice")
        names.add(shard["name"])
    if manifest["complete"]:
        if "counts" not in manifest:
            raise refuse("counts is missing")
        for key, value in manifest["counts"].items():
            if value != sum(s[key] for s in manifest["shards"]):
                raise refuse(f"counts.{key} is {value}, its shards hold {sum(s[key] for s in manifest['shards'])}")
    return manifest
