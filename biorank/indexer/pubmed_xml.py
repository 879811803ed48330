"""PubMed and MEDLINE XML (baseline and update files): citations in file order, a withdrawn PMID as a
:class:`~biorank.types.Deletion`, and reading that goes on at the next citation after XML that a parser gives up
on, in bounded memory however large a damaged stretch is."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from biorank.indexer.streams import (
    LINE_ALLOWANCE,
    PIECE,
    READ_ERRORS,
    BadRecord,
    ReaderError,
    Record,
    new_abstract,
    open_binary,
)
from biorank.types import Abstract, Deletion, Rejected

if TYPE_CHECKING:
    from lxml import etree

_XML_ALLOWANCE = 16 << 20
"""Bytes of XML a citation may take beyond its lines' allowance: its author lists, MeSH and references, which
run to thousands of entries in consortium papers, do not count towards the record's size."""

# PubmedArticleSet wraps MedlineCitation in PubmedArticle; the old MedlineCitationSet has it bare.
_PUBMED_TAGS = ("PubmedArticle", "MedlineCitation", "DeleteCitation", "PubmedBookArticle")
_PUBMED_ROOTS = ("PubmedArticleSet", "MedlineCitationSet")
_YEAR = re.compile(r"\d{4}")
_EDGE_BREAK = re.compile(r"^(?:\r?\n[ \t]*)+|(?:\r?\n[ \t]*)+$")
_INNER_BREAK = re.compile(r"[ \t]*\r?\n\s*")


def read_pubmed(file: Path, source: str, max_record_bytes: int) -> Iterator[Record]:
    """Citations in file order; after malformed or oversized XML, reading goes on at the next citation.

    One bad byte, a nesting past libxml2's limit, a text node over 10 MB or an entity that expands too far stops
    a parser for good, and a 30,000-citation baseline file would lose every citation after it. So the reader
    opens the file again, finds the next citation's start tag past both the error and every citation the parser
    had begun, and parses on from there inside the same root. XML that runs on past the citation allowance
    without completing a citation (text nodes each under libxml2's limit, or junk between citations) is cut off
    the same way, before the parser's tree can hold it.
    """
    # Imported here so the JSON Lines readers work without lxml installed.
    from lxml import etree

    root = _sniff_root(file)
    tags = _citation_tags(root)
    budget = LINE_ALLOWANCE * max_record_bytes + _XML_ALLOWANCE
    line = 0  # of the last record read, for a read error that does not say where it happened
    resume: _Resume | None = None
    with ExitStack() as streams:
        stream: IO[bytes] = streams.enter_context(open_binary(file))
        while True:
            offset = resume.line - 2 if resume else 0
            metered = _Metered(resume.stream(stream) if resume else stream, budget)
            events = etree.iterparse(metered, events=("start", "end"), tag=_PUBMED_TAGS, resolve_entities=False,
                                     no_network=True)
            begun = ended = 0  # citations whose start (end) tag the parser has read in this pass
            try:
                for event, element in events:
                    citation = element.tag in tags
                    if event == "start":
                        begun += citation
                        continue
                    if citation:
                        ended += 1
                        metered.restart()
                    if element.tag == "MedlineCitation" and _parent_tag(element) == "PubmedArticle":
                        continue  # read with its PubmedArticle, which ends next
                    line = offset + (element.sourceline or 1)
                    yield from _pubmed_element(element, source, offset)
                    _release(element)
                break
            except etree.XMLSyntaxError as exc:
                if root is None:
                    raise ReaderError(f"{source} is not PubMed XML: {exc.msg}") from None
                problem, detail, where = "malformed XML", exc.msg, None
                # The resumed citation's line starts at the citation (line 2 of what the parser reads), so the
                # parser's columns on it are short of the file's by the bytes left out before the citation.
                error: _Position | None = _Position(
                    offset + exc.lineno, (exc.offset or 0) + (resume.column if resume and exc.lineno == 2 else 0))
            except _TooLarge:
                if root is None:
                    raise ReaderError(f"{source} is not PubMed XML: over {budget:,} bytes without a PubMed root or "
                                      "citation") from None
                problem, error, where = "record too large", None, offset + metered.lines
                detail = (f"over {budget:,} bytes of XML without a complete citation, more than one with a record "
                          f"of --max-record-bytes {max_record_bytes:,} takes")
            except READ_ERRORS as exc:
                # The parser does not say how far it got; the last record read is the best place to point at.
                yield Rejected(source, line, None, f"file unreadable after this record, the rest was skipped: {exc}",
                               rest_skipped=True)
                return
            # The parser has read past the error; the file is read again up to it (a damaged file costs one pass
            # per damaged spot), and the last pass's stream is closed.
            stream.close()
            stream = streams.enter_context(open_binary(file))
            starts = _citation_starts(stream, root)
            # Never back to a citation already begun: a resumed pass begins with the citation it resumed at.
            passed = _nth_start(starts, resume, max(begun, 1) if resume else begun)
            # libxml2 places an error inside an entity's replacement text in that text ("line 1, column 7"): a
            # position before the last citation begun is no place in the file, and never a place to resume.
            if error is not None and passed is not None and error < passed.position:
                error = None
            if where is None:
                where = error.line if error else passed.line if passed else 1
            after = next((found for found in starts if error is None or found.position > error), None)
            if after is None:
                yield Rejected(source, where, None, f"{problem}, the rest of the file was skipped: {detail}",
                               rest_skipped=True)
                return
            skipped = "the citation there" if begun > ended else "the XML there (outside any citation)"
            yield Rejected(source, where, None, f"{problem}, {skipped} was skipped and reading went on at line "
                                                f"{after.line}: {detail}")
            resume = after
    if not line and root is None:
        raise ReaderError(f"{source} has no PubMed records: its root is not PubmedArticleSet or MedlineCitationSet")


class _TooLarge(Exception):
    """The parser asked for more XML than a citation may take."""


class _Metered:
    """The parser's input, refused past ``budget`` bytes since the last citation ended.

    libxml2 bounds each text node (10 MB) but not a citation made of many of them, nor what lies between two
    citations: either would be held whole in the parser's tree. ``lines`` counts the lines handed over, so a
    refusal can say where it happened.
    """

    def __init__(self, stream: IO[bytes] | _Joined, budget: int) -> None:
        self._stream = stream
        self._budget = budget
        self._since = 0
        self.lines = 1

    def read(self, size: int = -1) -> bytes:
        if self._since > self._budget:
            raise _TooLarge
        chunk = self._stream.read(size)
        self._since += len(chunk)
        self.lines += chunk.count(b"\n")
        return chunk

    def restart(self) -> None:
        """A citation ended: the next one has the whole budget."""
        self._since = 0


@dataclass(frozen=True, order=True)
class _Position:
    """A place in the file: 1-based line, 0-based byte column (libxml2's columns are 0-based too)."""

    line: int
    column: int


@dataclass(frozen=True)
class _Resume:
    """A citation's start tag, ``offset`` bytes into the file at ``line``/``column``: where parsing can start
    again, from byte ``at`` of ``piece``, the last bytes the scan read."""

    root: str
    offset: int
    line: int
    column: int
    piece: bytes
    at: int

    @property
    def position(self) -> _Position:
        return _Position(self.line, self.column)

    def stream(self, rest: IO[bytes]) -> _Joined:
        # The root's start tag on a line of its own, then the citation's line from the citation on, so the
        # parser's lines are the file's (less one line) and no half element is read. What came before the
        # citation is left out, not blanked: on a one-line file it can be a text node over libxml2's 10 MB
        # limit, and blanks in its place hit the same limit again.
        return _Joined(f"<{self.root}>\n".encode() + self.piece[self.at:], rest)


class _Joined:
    """A read-only binary stream of some bytes followed by the rest of another stream."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._head:
            size = len(self._head) if size is None or size < 0 else size
            chunk, self._head = self._head[:size], self._head[size:]
            return chunk
        return self._rest.read(size)


def _sniff_root(file: Path) -> str | None:
    """The root element's name from the file's first bytes, if it is one of PubMed's."""
    try:
        with open_binary(file) as stream:
            head = stream.read(1 << 16)
    except READ_ERRORS:
        return None
    match = re.search(rb"<(" + "|".join(_PUBMED_ROOTS).encode() + rb")[\s>]", head)
    return match.group(1).decode() if match else None


def _citation_tags(root: str | None) -> tuple[str, ...]:
    """The elements that are records under ``root``: those the parser counts and the scan looks for alike."""
    # Under PubmedArticleSet a bare MedlineCitation start is the inside of a PubmedArticle, not a record.
    if root == "PubmedArticleSet":
        return "PubmedArticle", "DeleteCitation", "PubmedBookArticle"
    return "MedlineCitation", "DeleteCitation"


def _citation_starts(stream: IO[bytes], root: str) -> Iterator[_Resume]:
    """Every citation start tag in ``stream`` (read from its start), in file order.

    The file is scanned in pieces, lines counted as they pass, so a line of hundreds of MB is never held whole.
    While a start is being handled, ``stream`` stands right after the piece it was found in, so parsing can go
    on from there.
    """
    tags = _citation_tags(root)
    pattern = re.compile(rb"<(?:" + "|".join(tags).encode() + rb")[\s>]")
    # A tag cut between two pieces is found whole in the next, which starts with the last bytes of this one.
    keep = max(map(len, tags)) + 1
    buffer, start = b"", 0  # the bytes in hand, and their offset in the file
    lines = _Lines()
    last = -1  # offset of the last tag yielded, which the kept bytes can show again
    try:
        while piece := stream.read(PIECE):
            drop = max(0, len(buffer) - keep)
            lines.count(buffer, start, start + drop)
            buffer, start = buffer[drop:] + piece, start + drop
            for match in pattern.finditer(buffer):
                at = start + match.start()
                if at > last:
                    lines.count(buffer, start, at)
                    yield _Resume(root, at, lines.line, at - lines.line_start, buffer, match.start())
                    last = at
    except READ_ERRORS:
        return  # a truncated file: the starts before the break are all there are


class _Lines:
    """Lines counted along a file as it passes, each byte once: ``line`` is the line at offset ``counted``, and
    starts at offset ``line_start``."""

    def __init__(self) -> None:
        self.counted, self.line, self.line_start = 0, 1, 0

    def count(self, buffer: bytes, start: int, end: int) -> None:
        """Count on to offset ``end``, through ``buffer``, which holds the file from offset ``start``."""
        if end <= self.counted:
            return
        begin = self.counted - start
        if newlines := buffer.count(b"\n", begin, end - start):
            self.line += newlines
            self.line_start = start + buffer.rindex(b"\n", begin, end - start) + 1
        self.counted = end


def _nth_start(starts: Iterator[_Resume], since: _Resume | None, count: int) -> _Resume | None:
    """The ``count``-th of ``starts`` from ``since`` on (``since`` itself the first), taken from ``starts``; None
    for a count of 0, or past the last."""
    if not count:
        return None
    for found in starts:
        if since is None or found.offset >= since.offset:
            count -= 1
            if not count:
                return found
    return None


def _parent_tag(element: etree._Element) -> str | None:
    parent = element.getparent()
    return None if parent is None else parent.tag


def _release(element: etree._Element) -> None:
    # iterparse keeps building the whole tree; dropping each finished record keeps memory bounded.
    element.clear(keep_tail=True)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


def _pubmed_element(element: etree._Element, source: str, offset: int) -> Iterator[Record]:
    """The record of one citation element; ``offset`` is how many lines of the file precede the parser's."""
    line = offset + (element.sourceline or 1)
    if element.tag == "DeleteCitation":
        # Update files withdraw citations this way: the indexer removes them, so they are not rejects.
        for pmid in element.iterfind("PMID"):
            where = offset + pmid.sourceline if pmid.sourceline else line
            pmid_text = _inner_text(pmid)
            yield Deletion(source, where, pmid_text) if pmid_text else Rejected(
                source, where, None, "empty PMID in DeleteCitation")
    elif element.tag == "PubmedBookArticle":
        pmid = _inner_text(element.find("BookDocument/PMID")) or None
        yield Rejected(source, line, pmid, "PubMed book record (PubmedBookArticle), not read")
    else:
        citation = element if element.tag == "MedlineCitation" else element.find("MedlineCitation")
        try:
            yield _citation(citation, source, line, element.find("PubmedData/ArticleIdList"))
        except BadRecord as bad:
            yield Rejected(source, line, bad.id, bad.reason)


def _citation(citation: etree._Element | None, source: str, line: int,
              article_ids: etree._Element | None = None) -> Abstract:
    """``article_ids``: the PubmedArticle's own ``PubmedData/ArticleIdList`` (absent in the bare MedlineCitation of
    older files), where the DOI is first looked for."""
    if citation is None:
        raise BadRecord("PubmedArticle without a MedlineCitation")
    pmid = _inner_text(citation.find("PMID"))
    if not pmid:
        raise BadRecord("citation without a PMID")
    article = citation.find("Article")
    if article is None:
        raise BadRecord("citation without an Article", pmid)
    return new_abstract(
        pmid,
        _inner_text(article.find("ArticleTitle")),
        _join_sections(article.iterfind("Abstract/AbstractText")),
        None,
        source,
        line,
        empty="empty title and abstract",
        journal=_inner_text(article.find("Journal/Title")) or None,
        year=_pubmed_year(article),
        mesh=tuple(_inner_text(name) for name in citation.iterfind("MeshHeadingList/MeshHeading/DescriptorName")),
        authors=_authors(article),
        doi=_doi(article, article_ids),
        publication_types=_texts(article.iterfind("PublicationTypeList/PublicationType")),
        mesh_major=_texts(heading.find("DescriptorName") for heading in citation.iterfind("MeshHeadingList/MeshHeading")
                          if any(e.get("MajorTopicYN") == "Y" for e in heading.iterfind("*"))),
        journal_abbrev=_inner_text(citation.find("MedlineJournalInfo/MedlineTA"))
        or _inner_text(article.find("Journal/ISOAbbreviation")) or None,
    )


def _texts(elements: Iterable[etree._Element | None]) -> tuple[str, ...]:
    """The non-empty inner texts of ``elements``, in order, each once."""
    return tuple(dict.fromkeys(text for e in elements if (text := _inner_text(e))))


def _authors(article: etree._Element) -> tuple[str, ...]:
    """Each author as PubMed cites one: "LastName Initials" ("Smith JA"), a group by its CollectiveName.

    Only the list of authors: a book chapter's editors come in an AuthorList of ``Type="editors"``.
    """
    names = []
    for authors in article.iterfind("AuthorList"):
        if authors.get("Type", "authors") != "authors":
            continue
        for author in authors.iterfind("Author"):
            # Names are plain text (no inline markup, no line breaks), read without _inner_text's walk.
            last = (author.findtext("LastName") or "").strip()
            name = f"{last} {(author.findtext('Initials') or '').strip()}".strip() if last else _inner_text(
                author.find("CollectiveName"))
            if name:
                names.append(name)
    return tuple(names)


def _doi(article: etree._Element, article_ids: etree._Element | None) -> str | None:
    """The article's DOI: PubmedData's (the citation's own ArticleIdList, not those of its references), else the
    Article's ELocationID."""
    found = [] if article_ids is None else article_ids.iterfind("ArticleId[@IdType='doi']")
    for element in (*found, *article.iterfind("ELocationID[@EIdType='doi']")):
        if doi := _inner_text(element):
            return doi
    return None


def _join_sections(sections: Iterator[etree._Element]) -> str:
    """Join AbstractText sections the way BioASQ does, so its gold snippet offsets index our text.

    A labelled section becomes ``"LABEL: text"``, and sections follow each other with no separator at all
    (``"...interaction data.RESULTS: An object..."``). Each section's text is stripped first: 2016 MEDLINE files
    end many unlabelled sections with a space.
    """
    parts = []
    for section in sections:
        text = _inner_text(section)
        label = (section.get("Label") or "").strip()
        parts.append(f"{label}: {text}" if label else text)
    return "".join(parts)


def _inner_text(element: etree._Element | None) -> str:
    """The element's text with that of inline markup (``<sub>``, ``<i>``, ...) kept in place.

    Pretty-printed PubMed XML puts a line break and indentation next to inline tags (``β\\n\\t\\t<sub>2</sub>``):
    that is layout, so it is dropped at a tag boundary and becomes one space inside a text run.
    """
    if element is None:
        return ""
    if not len(element):  # no inline markup (most elements): its own text, without walking a tree
        text = element.text or ""
        return (_INNER_BREAK.sub(" ", _EDGE_BREAK.sub("", text)) if "\n" in text else text).strip()
    chunks = (
        _INNER_BREAK.sub(" ", _EDGE_BREAK.sub("", chunk)) if "\n" in chunk else chunk for chunk in element.itertext()
    )
    return "".join(chunks).strip()


def _pubmed_year(article: etree._Element) -> int | None:
    # PubDate has Year, or only a free-text MedlineDate ("1998 Dec-1999 Jan"); ArticleDate is the e-pub date.
    for path in ("Journal/JournalIssue/PubDate/Year", "Journal/JournalIssue/PubDate/MedlineDate", "ArticleDate/Year"):
        match = _YEAR.search(article.findtext(path) or "")
        if match:
            return int(match.group())
    return None
