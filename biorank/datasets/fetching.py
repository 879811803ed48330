"""``biorank datasets`` in the library: whether a data folder holds a set (each file's SHA-256 against its pin), and
a set written into it, from a mirror laid out the same way or from its publishers' files, converted to the layout
where theirs differs.

The publishers' downloads wait in ``DATA/.downloads/`` until their set is written (a run after a failure fetches
none of them again) and are removed then. Every file of the layout is written as ``NAME.part`` and renamed once its
SHA-256 is the pinned one, so a file with its own name is always a whole, verified one.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import re
import tarfile
import urllib.parse
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from biorank.datasets.catalogue import Dataset
from biorank.datasets.transfer import (
    CHUNK,
    is_url,
    joined,
    matches,
    md5_of,
    shown,
    small,
    transfer,
    verify,
    write_file,
)
from biorank.errors import DatasetError
from biorank.types import Echo, StageProgress

DOWNLOADS = ".downloads"
"""The folder of the data folder that keeps the publishers' downloads until their set is written."""
UPDATE_FILE = re.compile(r"pubmed(\d{2})n(\d{4})\.xml\.gz")
_HREF = re.compile(rb'href="(pubmed\d{2}n\d{4}\.xml\.gz)"')
# NLM writes OpenSSL's form, "MD5(pubmed25n1275.xml.gz)= <hex>"; md5sum's "<hex>  name" is taken too.
_MD5 = re.compile(r"MD5\s*\((?P<name>[^)]*)\)\s*=\s*(?P<md5>[0-9a-fA-F]{32})|^(?P<sum>[0-9a-fA-F]{32})\s", re.M)


@dataclass(frozen=True)
class Presence:
    """What a data folder holds of a set: the files there and verified, those there with other content, and those
    missing (paths of the layout).

    Example:
        >>> Presence(("scifact/corpus.jsonl",), (), ("scifact/qrels/train.tsv",)).describe()
        'partly: 1 of 2 files'
    """

    verified: tuple[str, ...]
    differing: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return bool(self.verified) and not self.differing and not self.missing

    def describe(self) -> str:
        if self.complete:
            return "yes"
        if not self.verified:
            return f"no ({len(self.differing)} not as pinned)" if self.differing else "no"
        parts = [f"{len(self.verified)} of {len(self.verified) + len(self.differing) + len(self.missing)} files"]
        if self.differing:
            parts.append(f"{len(self.differing)} not as pinned")
        return f"partly: {', '.join(parts)}"


@dataclass(frozen=True)
class Fetched:
    """What :func:`get` did for a set: the files of the layout it wrote, and those it found there verified."""

    dataset: str
    written: tuple[str, ...]
    kept: tuple[str, ...]


def presence(ds: Dataset, folder: Path) -> Presence:
    """What ``folder`` holds of ``ds``, every file checked against its pin (for PubMed's update files, against the
    ``.md5`` NLM published beside each).

    Args:
        ds: the set.
        folder: the data folder (``data``, or ``BIORANK_DATA``).

    Returns:
        Its :class:`Presence`.

    Example:
        >>> presence(dataset("scifact"), Path("data")).describe()  # doctest: +SKIP
        'yes'
    """
    if ds.newest:
        found = tuple(f"{ds.newest}/{name}" for name in _verified_update_files(folder / ds.newest))
        return Presence(found, (), () if found else (f"{ds.newest}/",))
    verified, differing, missing = [], [], []
    for pin in ds.files:
        path = folder / pin.path
        if matches(path, sha256=pin.sha256, size=pin.size):
            verified.append(pin.path)
        else:
            (differing if path.exists() else missing).append(pin.path)
    return Presence(tuple(verified), tuple(differing), tuple(missing))


def get(ds: Dataset, folder: Path, mirror: str | None = None, *, progress: StageProgress | None = None,
        echo: Echo | None = None) -> Fetched:
    """Writes the files of ``ds`` that ``folder`` lacks (or holds with another content), each verified against its
    pin: copied from ``mirror``, else made from the publishers' downloads.

    Args:
        ds: the set (:func:`~biorank.datasets.catalogue.dataset` finds it by name).
        folder: the data folder; made when missing.
        mirror: an http(s) URL or a folder laid out as the data folder is; None: the publishers.
        progress: called with (file, bytes so far, bytes in all) while a file downloads.
        echo: one-line notes (what is fetched from where).

    Returns:
        The :class:`Fetched` files.

    Example:
        >>> get(dataset("scifact"), Path("data"))  # doctest: +SKIP
        Fetched(dataset='scifact', written=('scifact/claims_train.jsonl', ...), kept=())
    """
    say = echo or (lambda _: None)
    if ds.newest:
        return _newest(ds, folder, mirror, progress, say)
    before = presence(ds, folder)
    for path in before.differing:
        say(f"{path} is not the pinned file: fetching it again")
    wanted = set(before.differing) | set(before.missing)
    if not wanted:
        return Fetched(ds.name, (), before.verified)
    if mirror is not None:
        for pin in ds.files:
            if pin.path in wanted:
                transfer(joined(mirror, pin.path), folder / pin.path, pin.path, sha256=pin.sha256, size=pin.size,
                         progress=progress)
    elif not ds.sources:
        raise DatasetError(f"{ds.name} cannot be fetched by a program: `biorank datasets get {ds.name}` says how to "
                           "get it; or copy it from a mirror with --from URL|DIR")
    else:
        work = _Work(ds, folder, wanted, progress, say)
        _BUILDERS[ds.name](work)
        work.finish()
    return Fetched(ds.name, tuple(p.path for p in ds.files if p.path in wanted), before.verified)


def instructions(ds: Dataset, folder: Path) -> list[str]:
    """What the user of a set no program may fetch does: its steps, the files the data folder must then hold, and
    the way from a mirror.

    Args:
        ds: a set without downloads (``bioasq``, ``bioasq-abstracts``).
        folder: the data folder the files must go into.

    Returns:
        The lines to print, one a line.

    Example:
        >>> instructions(dataset("bioasq"), Path("data"))[2]  # doctest: +SKIP
        '  1. register (free) at https://participants-area.bioasq.org/ and accept BioASQ's terms of use;'
    """
    lines = [f"{ds.name}: {ds.about}", f"It comes from {ds.origin}. To get it:",
             *(f"  {n}. {step}" for n, step in enumerate(ds.steps, 1))]
    by_folder: dict[str, list[str]] = {}
    for pin in ds.files:
        parent, _, name = pin.path.rpartition("/")
        by_folder.setdefault(parent, []).append(name)
    lines += [f"       {folder / parent}/: {' '.join(names)}" for parent, names in by_folder.items()]
    lines += [f"  {len(ds.steps) + 1}. check them: biorank datasets list --to {folder}",
              f"or copy the set from a mirror that has it: biorank datasets get {ds.name} --from URL|DIR --to {folder}"]
    return lines


class _Work:
    """One set made from its publishers' downloads: which files are wanted, the downloads (verified, kept until
    the set is whole), and each file written, verified and renamed."""

    def __init__(self, ds: Dataset, folder: Path, wanted: set[str], progress: StageProgress | None,
                 say: Echo) -> None:
        self.ds, self.folder, self.wanted = ds, folder, wanted
        self.progress, self.say = progress, say
        self.written: set[str] = set()
        self.downloads: set[Path] = set()

    def wants(self, *paths: str) -> bool:
        return any(path in self.wanted for path in paths)

    def source(self, filename: str) -> Path:
        """The publisher's download of this name, verified (fetched once into :data:`DOWNLOADS`)."""
        source = self.ds.source(filename)
        dest = self.folder / DOWNLOADS / filename
        if not matches(dest, sha256=source.sha256, md5=None if source.sha256 else source.md5, size=source.size):
            size = f" ({source.size / 1e6:.1f} MB)" if source.size else ""
            self.say(f"fetching {filename}{size} from {urllib.parse.urlsplit(source.url).hostname}")
            transfer(source.url, dest, filename, sha256=source.sha256, md5=source.md5, size=source.size,
                     progress=self.progress)
        self.downloads.add(dest)
        return dest

    def fetch(self, path: str) -> None:
        """A file of the layout that is the publisher's file as it is: downloaded straight to its place."""
        pin = next(p for p in self.ds.files if p.path == path)
        source = self.ds.source(pin.name)
        self.say(f"fetching {pin.name} from {urllib.parse.urlsplit(source.url).hostname}")
        transfer(source.url, self.folder / path, path, sha256=pin.sha256, size=pin.size, progress=self.progress)
        self.written.add(path)

    def write(self, path: str, chunks: Iterable[bytes], source: str) -> None:
        """A file of the layout made from a download: written as ``.part``, verified, renamed (unless not wanted:
        then ``chunks`` is not read)."""
        if path not in self.wanted:
            return
        pin = next(p for p in self.ds.files if p.path == path)
        dest = self.folder / path
        part = dest.with_name(dest.name + ".part")
        write_file(part, chunks)
        verify(part, path, self.ds.source(source).url, sha256=pin.sha256)
        part.replace(dest)
        self.written.add(path)

    def finish(self) -> None:
        """Checks that every wanted file was written, then removes the downloads (and their folder, if empty)."""
        left = sorted(self.wanted - self.written)
        if left:
            raise DatasetError(f"the publishers' files of {self.ds.name} gave no {', '.join(left)}; take the set "
                               "from a mirror with --from URL|DIR")
        for download in self.downloads:
            download.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # other sets' downloads are still there
            (self.folder / DOWNLOADS).rmdir()


def _inner(name: str) -> str:
    """A member's path inside its archive's top folder (``data/corpus.jsonl`` → ``corpus.jsonl``)."""
    parts = name.removeprefix("./").split("/")
    return "/".join(parts[1:] if len(parts) > 1 else parts)


def _member(names: list[str], wanted: str, archive: str) -> str:
    found = [name for name in names if _inner(name) == wanted]
    if len(found) != 1:
        raise DatasetError(f"{archive} has {'no' if not found else 'more than one'} {wanted}: not the layout biorank "
                           "knows; take the set from a mirror with --from URL|DIR")
    return found[0]


def _from_tar(work: _Work, archive: str, members: dict[str, str]) -> None:
    """The wanted files of ``members`` (member inside the top folder → path of the layout), streamed out of a
    .tar.gz in one pass; every other member (the splits biorank holds out, raw dumps) is skipped unread."""
    wanted = {member: path for member, path in members.items() if work.wants(path)}
    if not wanted:
        return
    path = work.source(archive)
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                target = wanted.pop(_inner(member.name), None) if member.isfile() else None
                extracted = tar.extractfile(member) if target else None
                if target and extracted is not None:
                    with extracted:
                        work.write(target, _lf_chunks(iter(functools.partial(extracted.read, CHUNK), b"")), archive)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise DatasetError(f"{archive} cannot be read as a .tar.gz ({type(e).__name__}); delete {path} and run the "
                           "same command again") from None
    if wanted:
        raise DatasetError(f"{archive} has no {next(iter(wanted))}: not the layout biorank knows; take the set from "
                           "a mirror with --from URL|DIR")


def _scifact(work: _Work) -> None:
    # AllenAI's release holds the dev and test claims as well, which biorank's measurements hold out: not written.
    _from_tar(work, "data.tar.gz", {"corpus.jsonl": "scifact/corpus.jsonl",
                                    "claims_train.jsonl": "scifact/claims_train.jsonl"})
    if not work.wants("scifact/qrels/train.tsv", "scifact/queries_train.jsonl"):
        return
    with zipfile.ZipFile(work.source("scifact.zip")) as beir:
        names = beir.namelist()
        # BEIR wrote its qrels with Python's csv module, whose lines end in CRLF; the layout's lines end in LF (the
        # pin is of that file), so line ends are made LF here and in the queries (_lf_chunks), the rest kept as it is.
        qrels = beir.read(_member(names, "qrels/train.tsv", "scifact.zip")).replace(b"\r\n", b"\n")
        work.write("scifact/qrels/train.tsv", [qrels], "scifact.zip")
        judged = {line.split("\t", 1)[0] for line in qrels.decode("utf-8").splitlines()[1:]}
        with beir.open(_member(names, "queries.jsonl", "scifact.zip")) as queries:
            # BEIR's queries are every claim, test claims too: only the lines of the judged train claims.
            work.write("scifact/queries_train.jsonl", (_lf(line) for line in queries if _query_id(line) in judged),
                       "scifact.zip")


def _lf(line: bytes) -> bytes:
    return line[:-2] + b"\n" if line.endswith(b"\r\n") else line


def _lf_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` with CRLF line ends made LF, a CR at a chunk's end held back until the next chunk shows what
    follows it. The files the pins were taken from end their lines in LF; a release written where lines end in
    CRLF differs from them by that alone (as BEIR's qrels do), and on an LF release this changes nothing."""
    held = b""
    for chunk in chunks:
        chunk = (held + chunk).replace(b"\r\n", b"\n")
        held, chunk = (b"\r", chunk[:-1]) if chunk.endswith(b"\r") else (b"", chunk)
        yield chunk
    yield held


def _query_id(line: bytes) -> str:
    try:
        return str(json.loads(line)["_id"])
    except (ValueError, KeyError, TypeError):
        raise DatasetError("scifact.zip: a line of queries.jsonl is not a BEIR query; take the set from a mirror "
                           "with --from URL|DIR") from None


def _nfcorpus(work: _Work) -> None:
    # The release's test split (held out) and raw dumps are skipped; so is train.docs, which the layout lacks.
    _from_tar(work, "nfcorpus.tar.gz", {pin.name: pin.path for pin in work.ds.files})


def _pubmed(work: _Work) -> None:
    for pin in work.ds.files:
        if work.wants(pin.path):
            work.fetch(pin.path)


def _pubmedqa(work: _Work) -> None:
    questions = json.loads(work.source("ori_pqal.json").read_bytes())
    held_out = json.loads(work.source("test_ground_truth.json").read_bytes())
    # Whole in memory (2.6 MB): a JSON object cannot be split by key as it streams. The rest is written as the
    # authors' split script writes a split (json.dump(..., indent=4)), which is the pinned file byte for byte;
    # the test questions are never written.
    kept = {pmid: question for pmid, question in questions.items() if pmid not in held_out}
    work.write("pubmedqa/pqal_cv_set.json", [json.dumps(kept, indent=4).encode("utf-8")], "ori_pqal.json")


_BUILDERS: dict[str, Callable[[_Work], None]] = {
    "scifact": _scifact, "nfcorpus": _nfcorpus, "pubmed": _pubmed, "pubmedqa": _pubmedqa,
}


def _newest(ds: Dataset, folder: Path, mirror: str | None, progress: StageProgress | None, say: Echo) -> Fetched:
    """The newest update file of NLM's folder (or the mirror's), verified against the .md5 beside it; no pin can
    be written down for it in advance, as NLM adds one every day and replaces them all each December."""
    assert ds.newest is not None
    where = joined(mirror, ds.newest) if mirror is not None else ds.sources[0].url
    name = max(_update_names(where, ds.newest), key=_number)
    label = f"{ds.newest}/{name}"
    md5 = _md5_in(small(joined(where, f"{name}.md5"), f"{label}.md5"), name, label)
    target = folder / ds.newest / name
    written: tuple[str, ...] = ()
    if not matches(target, md5=md5):
        say(f"fetching {name} from {urllib.parse.urlsplit(where).hostname or shown(where)}, checked against its .md5")
        transfer(joined(where, name), target, label, md5=md5, progress=progress)
        written = (label,)
    write_file(target.with_name(f"{name}.md5"), [f"MD5({name})= {md5}\n".encode()])
    return Fetched(ds.name, written, () if written else (label,))


def _update_names(where: str, folder: str) -> list[str]:
    if is_url(where):
        # Only names of NLM's form are taken from the listing page; nothing else of it is read or shown.
        names = {m.decode() for m in _HREF.findall(small(f"{where.rstrip('/')}/", f"the listing of {folder}/"))}
    else:
        try:
            names = {p.name for p in Path(where).iterdir()}
        except OSError:
            raise DatasetError(f"{where} is not a folder: the mirror has no {folder}/") from None
    found = [name for name in names if UPDATE_FILE.fullmatch(name)]
    if not found:
        raise DatasetError(f"{shown(where)} holds no update file (pubmedYYnNNNN.xml.gz)")
    return found


def _number(name: str) -> tuple[int, int]:
    match = UPDATE_FILE.fullmatch(name)
    assert match is not None
    return int(match[1]), int(match[2])


def _md5_in(text: bytes, name: str, label: str) -> str:
    match = _MD5.search(text.decode("ascii", errors="replace"))
    if match is None or (match["name"] is not None and match["name"].strip() != name):
        raise DatasetError(f"{label}.md5 holds no MD5 digest of {name}; try again later")
    return (match["md5"] or match["sum"]).lower()


def _verified_update_files(where: Path) -> list[str]:
    if not where.is_dir():
        return []
    found = []
    for path in sorted(where.iterdir()):
        md5_file = path.with_name(f"{path.name}.md5")
        if UPDATE_FILE.fullmatch(path.name) and md5_file.is_file():
            try:
                if md5_of(path) == _md5_in(md5_file.read_bytes()[:4096], path.name, path.name):
                    found.append(path.name)
            except DatasetError:
                continue  # an .md5 that names another file: not verified
    return found
