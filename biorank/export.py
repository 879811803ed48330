"""Search results as files other tools read: a reference manager (RIS, BibTeX), a spreadsheet (CSV), trec_eval
(a TREC run), PubMed itself (a list of PMIDs), or a program (JSON Lines).

Hits carry their scores; what a citation needs (authors, journal, year, DOI, abstract) is read from each hit's
first block (:func:`~biorank.store.inspection.first_blocks`, one ``mget`` however many queries), the fields
:data:`EXPORT_FIELDS`. A field the index does not hold (a BEIR index has no authors, one built before the
bibliographic fields has no DOI) is simply absent from what is written, never an empty placeholder.

Every format is written from data, never from templates a value could break out of: RIS values are one line
each (a line break inside one would start a tag), BibTeX values are escaped for TeX and kept brace-balanced, CSV
is quoted as RFC 4180 says and a text cell that a spreadsheet would run as a formula is neutralised.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from biorank.errors import BiorankError
from biorank.evaluation.runs import trec_line
from biorank.store.inspection import first_blocks

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

FORMATS = ("table", "json", "csv", "ris", "bibtex", "trec", "pmids")
"""What ``--format`` takes; ``table`` is the terminal's (``query`` only), the rest are files."""
FILE_FORMATS = FORMATS[1:]
EXPORT_FIELDS = ("title", "authors", "journal", "journal_abbrev", "year", "doi", "publication_types", "mesh",
                 "mesh_major", "abstract")
"""Block 0's fields an export reads, in the order CSV writes them."""
PUBMED_URL = "https://pubmed.ncbi.nlm.nih.gov/{}/"
SINGLE_QUERY = "1"
"""The query id a one-query export gives its TREC lines."""
_PMID = re.compile(r"^[0-9]{1,9}$")
_PUBMED_ONLY = ("journal", "journal_abbrev", "publication_types")
"""Fields only the PubMed reader fills: a numeric id with one of them is a PMID (SciFact's ids are numbers too)."""
_SPACE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")


@dataclass(frozen=True)
class Download:
    """How a format is sent as a file: its media type and the file name's extension."""

    media_type: str
    extension: str


DOWNLOADS = {
    "json": Download("application/x-ndjson", "jsonl"),
    "csv": Download("text/csv", "csv"),
    "ris": Download("application/x-research-info-systems", "ris"),
    "bibtex": Download("application/x-bibtex", "bib"),
    "trec": Download("text/plain", "trec.txt"),
    "pmids": Download("text/plain", "pmids.txt"),
}


class ExportError(BiorankError):
    """A format biorank does not write."""


def check_format(fmt: str, allowed: Sequence[str] = FILE_FORMATS) -> str:
    """``fmt`` itself, or one line saying which formats there are."""
    if fmt not in allowed:
        raise ExportError(f"no export format {fmt!r}: choose one of {', '.join(allowed)}")
    return fmt


def cited_rows(client: OpenSearch, index: str, answers: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict]:
    """One row per hit of every query, in order: the hit's own fields (id, rank, score parts, snippets), its
    query's id, and the stored fields of :data:`EXPORT_FIELDS` its document has.

    Args:
        client: the cluster.
        index: the documents index the hits came from.
        answers: query id -> its hits as JSON-ready dicts (``Answer.to_dicts()``, or the API's hits).

    Returns:
        The rows :func:`render` writes; a field is present only where the document has a value for it.

    Example:
        >>> rows = cited_rows(client, "pubmed", {"1": answer.to_dicts()})  # doctest: +SKIP
        >>> render("ris", rows, tag="biorank-hybrid")  # doctest: +SKIP
    """
    ids = [hit["id"] for hits in answers.values() for hit in hits]
    stored = first_blocks(client, index, ids, EXPORT_FIELDS)
    rows = []
    for query_id, hits in answers.items():
        for hit in hits:
            found = {k: v for k, v in stored.get(hit["id"], {}).items() if v not in (None, "", [])}
            rows.append({"query_id": query_id, **hit, **found})
    return rows


def render(fmt: str, rows: Sequence[Mapping[str, Any]], *, tag: str = "biorank") -> str:
    """``rows`` (:func:`cited_rows`) written in ``fmt``, one of :data:`FILE_FORMATS`.

    Per-hit formats (json, csv, trec) keep a row per query and hit; the bibliographies (ris, bibtex) and the
    PMID list hold each document once, where it first came, as a reference manager or PubMed wants them.

    Args:
        fmt: the format.
        rows: the hits with their stored fields.
        tag: the run's name in TREC lines (their sixth column).

    Returns:
        The file's text (RIS and CSV with CRLF line ends, as their specifications say; the others LF).

    Example:
        >>> render("pmids", [{"id": "17942999", "rank": 1, "score": 1.0}])
        '17942999\\n'
    """
    check_format(fmt)
    if fmt == "json":
        return "".join(json.dumps(dict(row), ensure_ascii=False) + "\n" for row in rows)
    if fmt == "csv":
        return to_csv(rows)
    if fmt == "trec":
        return "".join(trec_line(row.get("query_id") or SINGLE_QUERY, row["id"], row["rank"], row["score"], tag)
                       for row in rows)
    documents: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        documents.setdefault(row["id"], row)
    if fmt == "pmids":
        return "".join(f"{doc_id}\n" for doc_id in documents)
    return to_ris(documents.values()) if fmt == "ris" else to_bibtex(documents.values())


def pubmed_url(row: Mapping[str, Any]) -> str | None:
    """The document's PubMed page where its id is a PMID: a number, on a document only PubMed XML describes."""
    if _PMID.match(str(row.get("id", ""))) and any(row.get(name) for name in _PUBMED_ONLY):
        return PUBMED_URL.format(row["id"])
    return None


def one_line(value: Any) -> str:
    """``value`` as text on one line: every run of white space and control characters becomes one space."""
    return _SPACE.sub(" ", str(value)).strip()


# --- RIS ---------------------------------------------------------------------------------------------------
RIS_END = "\r\n"
"""The RIS specification ends every line with CR LF; Zotero, EndNote and Mendeley read it so."""
_RIS_REFERENCE_ID = re.compile(r"^[0-9A-Z]{1,20}$")


def to_ris(rows: Iterable[Mapping[str, Any]]) -> str:
    """Each row as an RIS reference: ``TY  - JOUR`` first, ``ER  - `` last, one ``TAG  - value`` line per field.

    Tags: AU per author ("Smith, J.A."), TI, T2 (the journal) and JA (its abbreviation), PY, DO, AN (the
    document's id), ID (the same where it is a reference id as the specification allows: up to 20 of 0-9 A-Z),
    UR (the PubMed page, for a PMID), AB, KW per MeSH heading. The specification allows no asterisk in author,
    keyword and periodical fields, so it is dropped there.

    Example:
        >>> to_ris([{"id": "1", "title": "T"}]).splitlines()
        ['TY  - JOUR', 'TI  - T', 'AN  - 1', 'ID  - 1', 'ER  - ']
    """
    lines: list[str] = []
    for row in rows:
        fields: list[tuple[str, Any]] = [("AU", _ris_author(a)) for a in row.get("authors") or ()]
        fields += [("TI", row.get("title")), ("T2", _no_star(row.get("journal"))),
                   ("JA", _no_star(row.get("journal_abbrev"))), ("PY", row.get("year")), ("DO", row.get("doi")),
                   ("AN", row["id"])]
        if _RIS_REFERENCE_ID.match(str(row["id"])):
            fields.append(("ID", row["id"]))
        fields += [("UR", pubmed_url(row)), ("AB", row.get("abstract"))]
        fields += [("KW", _no_star(term)) for term in row.get("mesh") or ()]
        lines.append("TY  - JOUR")
        lines += [f"{tag}  - {text}" for tag, value in fields if value is not None and (text := one_line(value))]
        lines.append("ER  - ")
    return "".join(line + RIS_END for line in lines)


def _no_star(value: Any) -> str | None:
    return None if value is None else str(value).replace("*", "")


def _ris_author(name: str) -> str:
    split = split_name(name)
    return _no_star(f"{split[0]}, {'.'.join(split[1])}." if split else name) or ""


_INITIALS = re.compile(r"^(?P<last>\S.*?) (?P<initials>[A-Z]{1,4})$")
_GROUP_WORDS = frozenset({"group", "groups", "consortium", "committee", "investigators", "study", "collaboration",
                          "collaborative", "network", "team", "society", "association", "working", "writing",
                          "trial", "trials", "panel", "task", "force", "for", "of", "the", "and", "on", "in"})
"""Words of a group's name (MEDLINE's CollectiveName), never of a person's last name: a name that ends in capitals
("Writing Group for the WHI") is not read as a last name and initials when it has one."""


def split_name(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(last name, initials) of an author as biorank stores one ("van der Berg JA" → ("van der Berg", ("J",
    "A"))), or None for a group's name, which is cited as written.

    Example:
        >>> split_name("Smith JA"), split_name("Movement Disorder Group")
        (('Smith', ('J', 'A')), None)
    """
    match = _INITIALS.match(name.strip())
    if not match or _GROUP_WORDS & set(match["last"].lower().split()):
        return None
    return match["last"], tuple(match["initials"])


# --- BibTeX ------------------------------------------------------------------------------------------------
_TEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
        "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_SPECIAL = re.compile(r"[\\{}%&#$_~^]")
_VERBATIM_UNSAFE = re.compile(r"[{}\\%\s]")
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def tex_escape(value: Any) -> str:
    """``value`` on one line with TeX's special characters escaped, so it can neither end the field (a brace)
    nor run as a command (a backslash) nor comment out the rest of a line (%).

    Example:
        >>> print(tex_escape("50% of {x}_1 & $5"))
        50\\% of \\{x\\}\\_1 \\& \\$5
    """
    return _TEX_SPECIAL.sub(lambda m: _TEX[m.group()], one_line(value))


def _verbatim(value: Any) -> str:
    """A DOI or URL, which biblatex and the url package read verbatim (``\\_`` would be two characters of the
    link): only what could end the field or split it (braces, backslash, %, white space) is percent-encoded, as a
    resolver decodes it."""
    return _VERBATIM_UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), one_line(value))


def to_bibtex(rows: Iterable[Mapping[str, Any]]) -> str:
    """Each row as one ``@article``, its key unique in the file and made only of letters, digits, ``_`` and
    ``-`` (``pmid17942999``; another id as ``doc_`` and its safe characters, numbered where two meet).

    Example:
        >>> print(to_bibtex([{"id": "7", "title": "A & B", "authors": ["Smith JA"], "year": 2016}]), end="")
        @article{doc_7,
          author = {Smith, J. A.},
          title = {{A \\& B}},
          year = {2016},
          note = {biorank id 7},
        }
    """
    entries, keys = [], set()
    for row in rows:
        doc_id = str(row["id"])
        base = f"pmid{doc_id}" if pubmed_url(row) else "doc_" + (_KEY_UNSAFE.sub("_", doc_id).strip("_") or "x")
        key, n = base, 1
        while key in keys:
            n += 1
            key = f"{base}_{n}"
        keys.add(key)
        fields: list[tuple[str, str | None]] = [
            ("author", " and ".join(_bib_author(a) for a in row.get("authors") or ()) or None),
            ("title", f"{{{tex_escape(row['title'])}}}" if row.get("title") else None),
            ("journal", tex_escape(row["journal"]) if row.get("journal") else None),
            ("shortjournal", tex_escape(row["journal_abbrev"]) if row.get("journal_abbrev") else None),
            ("year", tex_escape(row["year"]) if row.get("year") else None),
            ("doi", _verbatim(row["doi"]) if row.get("doi") else None),
            ("pmid", doc_id if pubmed_url(row) else None),
            ("url", _verbatim(pubmed_url(row)) if pubmed_url(row) else None),
            ("note", None if pubmed_url(row) else f"biorank id {tex_escape(doc_id)}"),
            ("keywords", ", ".join(tex_escape(t) for t in row.get("mesh") or ()) or None),
            ("abstract", tex_escape(row["abstract"]) if row.get("abstract") else None),
        ]
        body = "".join(f"  {name} = {{{value}}},\n" for name, value in fields if value)
        entries.append(f"@article{{{key},\n{body}}}\n")
    return "\n".join(entries)


def _bib_author(name: str) -> str:
    split = split_name(name)
    if split is None:
        return f"{{{tex_escape(name)}}}"  # a group: braced, so BibTeX reads no "and" or comma inside as a split
    return f"{tex_escape(split[0])}, {' '.join(i + '.' for i in split[1])}"


# --- CSV ---------------------------------------------------------------------------------------------------
CSV_COLUMNS = ("query_id", "rank", "id", "score", "title", "authors", "journal", "journal_abbrev", "year", "doi",
               "publication_types", "mesh", "mesh_major", "url", "abstract")
"""The columns, in order; one that no row has a value for is left out (a BEIR index's have no authors), and
``query_id`` appears only where the rows come from several queries."""
LIST_SEPARATOR = "; "
_FORMULA = ("=", "+", "-", "@")


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """A header and one line per row, quoted as RFC 4180 says (CRLF line ends; a field with a comma or quote in
    quotes, its quotes doubled). Lists are joined by ``"; "``; text is put on one line (:func:`one_line`), so no
    control character reaches a terminal or a spreadsheet. A text cell that begins with ``= + - @`` gets a
    leading ``'``: a spreadsheet would otherwise run it as a formula, and a title or abstract is text from
    anyone. Numbers (rank, score, year) are written as numbers.

    Example:
        >>> to_csv([{"rank": 1, "id": "7", "score": -0.5, "title": "=HYPERLINK(1)"}]).splitlines()
        ['rank,id,score,title', "1,7,-0.5,'=HYPERLINK(1)"]
    """
    cells = [{**row, "url": pubmed_url(row)} for row in rows]
    several = len({row.get("query_id") for row in rows}) > 1
    columns = [c for c in CSV_COLUMNS if c in ("rank", "id", "score") or (
        c == "query_id" and several) or (c != "query_id" and any(row.get(c) not in (None, "", []) for row in cells))]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for row in cells:
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
    return out.getvalue()


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool | int | float):
        return value
    text = one_line(LIST_SEPARATOR.join(map(str, value)) if isinstance(value, list | tuple) else value)
    return "'" + text if text.startswith(_FORMULA) else text
