"""Bytes for ``biorank datasets``: a file fetched over HTTP(S) into ``NAME.part``, resumed with a Range request
after an interruption, or copied from a folder; checked against its pin before it takes its name, so a half-written
or substituted file never looks finished. Every failure is one line (:class:`DatasetError`) that says what to do,
and quotes nothing a server sent but its status code.

The download itself is :func:`biorank.downloads.download`, the one Maven artifacts resume with too; this module
words its failures for a data set's user.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from biorank.downloads import (
    CHUNK,
    TIMEOUT_S,
    DownloadError,
    disk_full,
    download,
    failure_reason,
    file_digest,
    request,
    sha256_of,
)
from biorank.errors import DatasetError
from biorank.types import StageProgress

PURPOSE = "biorank datasets"
"""What the User-Agent says biorank fetches for."""
SMALL_LIMIT = 8 << 20
"""The most bytes read for a folder's listing or an ``.md5`` file: a larger answer is not one."""


def is_url(location: str) -> bool:
    """Whether ``location`` (a mirror, a publisher's file) is fetched over HTTP(S) rather than read from disk.

    Example:
        >>> is_url("https://mirror.example.org/data"), is_url("/mnt/team/data")
        (True, False)
    """
    return location.startswith(("http://", "https://"))


def joined(location: str, relative: str) -> str:
    """``relative`` under a mirror's root or a publisher's folder.

    Args:
        location: an http(s) URL or a folder.
        relative: a path of the layout, ``/``-separated.

    Returns:
        The URL (``relative`` percent-quoted) or the path, as text.

    Example:
        >>> joined("https://mirror.example.org/data/", "scifact/qrels/train.tsv")
        'https://mirror.example.org/data/scifact/qrels/train.tsv'
    """
    if is_url(location):
        return f"{location.rstrip('/')}/{urllib.parse.quote(relative)}"
    return str(Path(location) / relative)


def shown(location: str) -> str:
    """A location as messages name it: a URL without user, password or query (a mirror's URL may carry them).

    Args:
        location: an http(s) URL or a path.

    Returns:
        The text to print.

    Example:
        >>> shown("https://me:secret@mirror.example.org/data/x.json?token=1")
        'https://mirror.example.org/data/x.json'
    """
    if not is_url(location):
        return location
    parts = urllib.parse.urlsplit(location)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def md5_of(path: Path) -> str:
    """The MD5 of the file at ``path``, in hex, for the publishers that state only that (NLM, BEIR).

    Args:
        path: the file, read in 1 MiB chunks.

    Returns:
        32 hex digits.

    Example:
        >>> md5_of(Path("data/pubmed/updatefiles/pubmed25n1275.xml.gz"))  # doctest: +SKIP
        '0f343b0931126a20f133d67c2b018a3b'
    """
    return file_digest(path, "md5")


def matches(path: Path, *, sha256: str | None = None, md5: str | None = None, size: int | None = None) -> bool:
    """Whether ``path`` is a file of this size and these digests.

    Args:
        path: the file (a missing one does not match).
        sha256, md5, size: what it must have; None is not checked.

    Returns:
        True when every one given matches.

    Example:
        >>> matches(Path("data/scifact/qrels/train.tsv"), sha256="ac0902d9…", size=13_582)  # doctest: +SKIP
        True
    """
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        return False
    return (sha256 is None or sha256_of(path) == sha256) and (md5 is None or md5_of(path) == md5)


def verify(path: Path, label: str, source: str, *, sha256: str | None = None, md5: str | None = None) -> None:
    """Deletes ``path`` and raises :class:`DatasetError` unless it has the SHA-256 (else the MD5) given; the one-line
    message names the file, where it came from, and both hashes.

    Args:
        path: the file just written (a ``.part``).
        label: how the message names it (``scifact/corpus.jsonl``).
        source: where it came from (a URL or a path).
        sha256, md5: its pin; with neither, nothing is checked.

    Example:
        >>> verify(Path("data/x.part"), "x.json", "https://example.org/x.json", sha256="…")  # doctest: +SKIP
    """
    kind, want = ("sha256", sha256) if sha256 else ("md5", md5)
    if want is None:
        return
    got = sha256_of(path) if kind == "sha256" else md5_of(path)
    if got != want:
        path.unlink(missing_ok=True)
        raise DatasetError(f"{label} from {shown(source)} failed verification: {kind} {got}, expected {want}; "
                           "nothing of it was kept")


def transfer(location: str, dest: Path, label: str, *, sha256: str | None = None, md5: str | None = None,
             size: int | None = None, progress: StageProgress | None = None) -> Path:
    """``dest``, holding the bytes at ``location`` and verified: fetched into ``dest.part`` (an interrupted download
    resumes from there), renamed only once its digest is the one pinned.

    Args:
        location: an http(s) URL, or a local file (a mirror that is a folder).
        dest: where the file goes; its folder is made.
        label: how messages and progress name the file (``scifact/corpus.jsonl``).
        sha256, md5, size: its pin (SHA-256, else MD5; the size, when known, bounds the resume and the progress).
        progress: called with (label, bytes so far, bytes in all).

    Returns:
        ``dest``.

    Example:
        >>> transfer("https://example.org/x.json", Path("data/x.json"), "x.json", sha256="…")  # doctest: +SKIP
    """
    part = dest.with_name(dest.name + ".part")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _write_error(e, dest) from None
    if is_url(location):
        _download(location, part, label, size, progress)
    else:
        _copy(Path(location), part, label, progress)
    verify(part, label, location, sha256=sha256, md5=md5)
    part.replace(dest)
    return dest


def small(location: str, label: str) -> bytes:
    """The whole of a small file or folder listing at ``location`` (an ``.md5``, NLM's list of update files).

    Args:
        location: an http(s) URL or a path.
        label: how a message names what was asked for.

    Returns:
        Its bytes, at most :data:`SMALL_LIMIT` of them.

    Example:
        >>> small("https://ftp.ncbi.nlm.nih.gov/pubmed/updatefiles/", "the listing")  # doctest: +SKIP
        b'<html>...'
    """
    if not is_url(location):
        try:
            with Path(location).open("rb") as f:
                return f.read(SMALL_LIMIT)
        except FileNotFoundError:
            raise DatasetError(f"{location} does not exist: the mirror has no {label}") from None
        except OSError as e:
            raise DatasetError(f"cannot read {location}: {e.strerror}") from None
    try:
        with urllib.request.urlopen(request(location, purpose=PURPOSE), timeout=TIMEOUT_S) as response:
            return response.read(SMALL_LIMIT)
    except urllib.error.HTTPError as e:
        raise _http_error(e.code, location, label) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise _network_error(location, label, failure_reason(e)) from None


def _download(url: str, part: Path, label: str, size: int | None, progress: StageProgress | None) -> None:
    """The shared resumable download, its failures said as a data set's (``--from``, "run the same command")."""
    counted = None if progress is None else (lambda done, total: progress(label, done, total or done))
    try:
        download(url, part, size=size, purpose=PURPOSE, progress=counted)
    except DownloadError as e:
        if e.status is not None:
            raise _http_error(e.status, url, label) from None
        if e.unwritable is not None:
            raise _write_error(e.unwritable, e.path) from None
        raise _network_error(url, label, e.reason, e.done, e.total) from None


def _copy(source: Path, part: Path, label: str, progress: StageProgress | None) -> None:
    try:
        inp = source.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{source} does not exist: the mirror has no {label}") from None
    except OSError as e:
        raise DatasetError(f"cannot read {source}: {e.strerror}") from None
    with inp:
        total = source.stat().st_size
        try:
            out = part.open("wb")
        except OSError as e:
            raise _write_error(e, part) from None
        with out:
            done = 0
            while chunk := inp.read(CHUNK):
                _write(out, chunk, part)
                done += len(chunk)
                if progress is not None:
                    progress(label, done, total)


def write_file(part: Path, chunks: Iterable[bytes]) -> None:
    """``chunks`` into the file ``part`` (its folder made); a full disk or a folder one may not write to is one line
    (:class:`DatasetError`).

    Args:
        part: the file to write (a ``.part``, renamed by the caller once verified).
        chunks: its bytes, consumed as they come.

    Example:
        >>> write_file(Path("data/x.json.part"), [b"{}", b"\\n"])  # doctest: +SKIP
    """
    try:
        part.parent.mkdir(parents=True, exist_ok=True)
        out = part.open("wb")
    except OSError as e:
        raise _write_error(e, part) from None
    try:
        with out:
            for chunk in chunks:
                _write(out, chunk, part)
    except BaseException:
        part.unlink(missing_ok=True)  # nothing resumes a converted file: a half of one is only clutter
        raise


def _write(out, chunk: bytes, part: Path) -> None:  # type: ignore[no-untyped-def]
    try:
        out.write(chunk)
    except OSError as e:
        raise _write_error(e, part) from None


def _http_error(code: int, url: str, label: str) -> DatasetError:
    # The status code only: the reason phrase and the body are the server's words, not biorank's.
    hint = "the mirror does not have it" if code == 404 else "try again later, or use a mirror with --from"
    return DatasetError(f"{shown(url)} answered HTTP {code} for {label}; {hint}")


def _network_error(url: str, label: str, reason: str, done: int | None = None,
                   total: int | None = None) -> DatasetError:
    host = urllib.parse.urlsplit(url).hostname
    if done is not None:
        of = f" of {total:,}" if total else ""
        return DatasetError(f"the download of {label} from {host} broke off after {done:,}{of} bytes ({reason}); "
                            "run the same command again: it resumes there")
    return DatasetError(f"cannot reach {host} for {label} ({reason}); check the network, or fetch from a mirror "
                        "with --from URL|DIR")


def _write_error(error: OSError, path: Path) -> DatasetError:
    if disk_full(error):
        return DatasetError(f"no space left for {path} ({error.strerror}); free some and run the same command "
                            "again: what is finished is kept")
    return DatasetError(f"cannot write {path}: {error.strerror}")
