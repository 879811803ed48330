"""PubMed's query syntax, parsed by a grammar into a tree, and the tree into OpenSearch clauses.

A PubMed user types ``(metformin[tiab] OR biguanide*) AND "gestational diabetes" NOT review[pt] AND
2015:2024[dp]``. The grammar (:data:`GRAMMAR`, parsed by lark's LALR parser) reads Boolean operators, parentheses,
"phrases", trailing-``*`` truncation, field tags and date ranges; the text of a term only ever becomes the value
of a ``match``, ``match_phrase``, ``term``, ``prefix`` or ``range`` clause, never query syntax of OpenSearch's
own (no ``query_string``), so nothing typed can reach a script or an unbounded expansion.

What a parsed query does (:class:`ParsedQuery`):

- the whole tree is a **filter**: it decides which documents may be found, as PubMed's Boolean search does;
- its untagged positive terms are the **free text** that ranks them, for both legs, as a plain query would be
  ranked (the dense leg sees nothing else); positive title/abstract-tagged terms add to the BM25 leg only;
- a query without free text (all tagged) is ranked by BM25 over its tagged terms alone, and says so.

Semantics, as PubMed's where the index allows:

- operators are upper case (``and`` is a word) and are read left to right, without precedence, as PubMed
  reads them: ``a OR b AND c`` is ``(a OR b) AND c``; terms side by side are joined by AND;
- a tag applies to the words just before it, back to the last operator or parenthesis: ``smith j[au]`` is the
  author "Smith J" (and "Smith JA": initials are matched as a prefix), ``breast neoplasms[mh]`` one heading;
  untagged words or words tagged ``[ti]``/``[ab]``/``[tiab]`` must each occur in that field;
- words are matched against the whole title and abstract, which only a document's first block holds (its
  ``text``, ``title`` and ``abstract`` fields): so a query whose tree has words is scored on first blocks only,
  and a document longer than one block is ranked by its first (its title and the start of its abstract), not
  by its best; a tree of metadata tags alone keeps every block;
- ``term*`` is every word of the index that starts with the term, as the index analyses it, at most
  :data:`MAX_EXPANSIONS` of them, in at most :data:`MAX_TRUNCATIONS` truncated terms a query;
- ``[mh]`` matches the heading itself (PubMed also takes the headings below it in the MeSH tree; the index
  keeps no tree).

A query has syntax (:func:`has_syntax`) when it holds a known field tag, an upper-case operator between terms or
a truncated word; only then does ``--syntax auto`` parse it, so a question in plain words, even one with quotes
or parentheses, is searched exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from biorank.errors import BiorankError

SYNTAXES = ("auto", "pubmed", "plain")
"""``auto``: parse a query that has syntax (:func:`has_syntax`); ``pubmed``: parse every query; ``plain``: none."""
MAX_EXPANSIONS = 100
"""Index words one truncated term expands to, at most (the ``top_terms_N`` rewrite of its ``prefix`` clause)."""
MAX_TRUNCATIONS = 5
"""Truncated terms a query may hold: with :data:`MAX_EXPANSIONS` and :data:`MAX_TERMS`, a query stays far below
OpenSearch's 1,024 clauses (``indices.query.bool.max_clause_count``)."""
MAX_TERMS = 100
MAX_DEPTH = 16
"""Parentheses nested deeper than this are refused: no query a person writes needs more."""
MIN_TRUNCATED = 3
"""Characters a truncated term needs before its ``*`` (PubMed asks for at least four; ``p53*`` is three)."""


class QuerySyntaxError(BiorankError):
    """A query that does not parse: one line, saying where (the column, counted from 1) and what is wrong."""


@dataclass(frozen=True, eq=False)
class Tag:
    """A field tag: what it is called, the index fields it searches, and how (``text``: analysed words,
    ``keyword``: whole values, ``author``, ``year`` or ``id``)."""

    name: str
    kind: Literal["text", "keyword", "author", "year", "id"]
    fields: tuple[str, ...]
    what: str


FREE = Tag("tiab", "text", ("text",), "title or abstract")
TAGS: dict[str, Tag] = {}
for _tag, _aliases in (
    (FREE, ("tiab", "title/abstract", "tw", "text word", "all", "all fields")),
    (Tag("ti", "text", ("title",), "title"), ("ti", "title")),
    (Tag("ab", "text", ("abstract",), "abstract"), ("ab", "abstract")),
    (Tag("au", "author", ("authors",), "author"), ("au", "author", "auth")),
    (Tag("mh", "keyword", ("mesh",), "MeSH heading"), ("mh", "mesh", "mesh terms", "mesh term")),
    (Tag("majr", "keyword", ("mesh_major",), "major MeSH heading"), ("majr", "mesh major topic")),
    (Tag("ta", "keyword", ("journal", "journal_abbrev"), "journal"), ("ta", "journal", "jour", "so")),
    (Tag("pt", "keyword", ("publication_types",), "publication type"), ("pt", "publication type")),
    (Tag("dp", "year", ("year",), "publication date"), ("dp", "pdat", "date - publication", "publication date")),
    (Tag("pmid", "id", ("id",), "PMID"), ("pmid", "uid", "pm")),
):
    TAGS.update(dict.fromkeys(_aliases, _tag))
STORED = {field for tag in TAGS.values() if tag.kind in ("keyword", "author", "year") for field in tag.fields}
"""The metadata fields a tag needs values in: an index made from a source without them (BEIR JSON Lines have no
MeSH) refuses the tag in one line instead of matching nothing."""

# A word is anything but space, parentheses, quotes and brackets, and not an operator on its own; a run of words is
# one token, so a tag after it applies to all of them (``smith j[au]``).
_WORD = r'(?!(?:AND|OR|NOT)(?![^\s()"\[\]]))[^\s()"\[\]]+'
GRAMMAR = rf"""
?start: expr
?expr: unary
     | expr OPERATOR unary -> binary
     | expr unary -> implicit
?unary: NOT unary -> negation
      | atom
?atom: RUN TAG? -> run
     | PHRASE TAG? -> phrase
     | "(" expr ")"
OPERATOR.2: /(AND|OR)(?![^\s()"\[\]])/
NOT.2: /NOT(?![^\s()"\[\]])/
RUN: /{_WORD}(?:\s+{_WORD})*/
PHRASE: /"[^"]*"/
TAG: /\[[^\[\]]*\]/
%import common.WS
%ignore WS
"""
_SYNTAX = re.compile(r'\[\s*([^\[\]]+?)\s*\]|(?<![^\s()"])(?:AND|OR|NOT)(?![^\s()"])|[^\s()"\[\]*]\*(?=[\s()"\[]|$)')


@dataclass(frozen=True)
class Term:
    """One term of the tree: its tag, its text, and whether it is a word, a phrase or a truncated word
    (``prefix``: the text without its ``*``); ``column`` is where it starts in the query."""

    tag: Tag
    text: str
    kind: Literal["word", "phrase", "prefix"] = "word"
    column: int = 0

    def describe(self) -> str:
        text = f'"{self.text}"' if self.kind == "phrase" else self.text + ("*" if self.kind == "prefix" else "")
        return f"{self.tag.name}:{text}"


@dataclass(frozen=True)
class Node:
    """``AND`` or ``OR`` of its children, or ``NOT`` of its one child."""

    op: Literal["AND", "OR", "NOT"]
    children: tuple[Node | Term, ...]

    def describe(self) -> str:
        return f"{self.op}({', '.join(child.describe() for child in self.children)})"


Tree = Node | Term


@dataclass(frozen=True)
class ParsedQuery:
    """A query read as PubMed reads it: the tree, the free text that ranks, and the clauses that filter and add
    to the BM25 leg (:meth:`filter_clause`, :meth:`lexical_clauses`).

    Example:
        >>> parsed = parse('(metformin OR biguanide*) AND "gestational diabetes" NOT review[pt] AND 2015:2024[dp]')
        >>> parsed.describe()
        'AND(OR(tiab:metformin, tiab:biguanide*), tiab:"gestational diabetes", NOT(pt:review), dp:2015:2024)'
        >>> parsed.free_text
        'metformin biguanide gestational diabetes'
    """

    query: str
    tree: Tree
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """The tree in one line, as ``--show-query`` prints it."""
        return self.tree.describe()

    @property
    def free_text(self) -> str:
        """The untagged terms that are not negated, in the query's order: what both legs rank by."""
        return " ".join(t.text for t in _positive(self.tree) if t.tag is FREE)

    @property
    def words(self) -> str:
        """What a model reads of the query: the free text, else the title/abstract-tagged words that are not
        negated, else the query as typed."""
        text_terms = [t.text for t in _positive(self.tree) if t.tag.kind == "text"]
        return self.free_text or " ".join(text_terms) or self.query

    def terms(self) -> Iterator[Term]:
        """Every term of the tree, in the query's order."""
        return _terms(self.tree)

    @property
    def stored_tags(self) -> set[Tag]:
        """The query's tags that need metadata values (:data:`STORED`): each needs one of its fields to hold some."""
        return {t.tag for t in self.terms() if set(t.tag.fields) & STORED}

    def filter_clause(self, stem: Callable[[str, str], str] = lambda _field, text: text.lower()) -> dict:
        """The tree as one clause of a bool query's ``filter``: the documents the query may find.

        Args:
            stem: the index's analysis of a truncated term in a text field (the searcher asks OpenSearch's
                ``_analyze``, so ``biguanide*`` finds the stemmed ``biguanid``); offline, lower case.
        """
        clause = _clause(self.tree, stem)
        if any(t.tag.kind == "text" for t in self.terms()):
            # An AND of words is a document's, not a block's: only the first block holds the whole text.
            return {"bool": {"filter": [{"term": {"block": 0}}, clause]}}
        return clause

    def lexical_clauses(self) -> tuple[dict, ...]:
        """``match`` clauses of the positive title/abstract-tagged terms, which add to the BM25 leg's score."""
        return tuple(_match(t, f) for t in _positive(self.tree) if t.tag.kind == "text" and t.tag is not FREE
                     and t.kind != "prefix" for f in t.tag.fields)


def has_syntax(query: str) -> bool:
    """Whether ``query`` uses PubMed's syntax: a known field tag, an upper-case AND/OR/NOT between terms, or a
    word truncated with ``*``. Quotes and parentheses alone do not count: questions in plain words have them.

    Example:
        >>> has_syntax("metformin[tiab] AND pregnancy"), has_syntax('what are "normal" vitamin D levels?')
        (True, False)
    """
    return any(match[1] is None or match[1].lower() in TAGS for match in _SYNTAX.finditer(query))


def parse(query: str) -> ParsedQuery:
    """``query`` in PubMed's syntax as a tree.

    Args:
        query: what a person typed.

    Returns:
        The parsed query.

    Raises:
        QuerySyntaxError: one line with the column, for unbalanced parentheses or quotes, an unknown tag, an empty
            term, a tag without a term, too deep a nesting, too many terms or truncations.

    Example:
        >>> parse("smith j[au] AND 2020[dp]").describe()
        'AND(au:smith j, dp:2020)'
    """
    from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    _check_nesting(query)
    try:
        raw = _parser().parse(query)
    except UnexpectedToken as e:
        if e.token.type == "$END":
            raise QuerySyntaxError(f"query syntax: the query ends too early (an operator or parenthesis without "
                                   f"what follows it, at column {len(query) + 1})") from None
        raise QuerySyntaxError(f"query syntax: {_token_problem(e.token)} at column {e.column}") from None
    except UnexpectedCharacters as e:
        raise QuerySyntaxError(f"query syntax: {_character_problem(query, e.pos_in_stream)} at column "
                               f"{e.column}") from None
    except UnexpectedEOF:
        raise QuerySyntaxError(f"query syntax: the query ends too early at column {len(query) + 1}") from None
    except LarkError as e:  # any other refusal of the grammar is still one line
        raise QuerySyntaxError(f"query syntax: {str(e).splitlines()[0]}") from None
    tree = _build(raw)
    terms = list(_terms(tree))
    if len(terms) > MAX_TERMS:
        raise QuerySyntaxError(f"query syntax: {len(terms)} terms; a query may have {MAX_TERMS} at most")
    truncated = [t for t in terms if t.kind == "prefix"]
    if len(truncated) > MAX_TRUNCATIONS:
        raise QuerySyntaxError(f"query syntax: {len(truncated)} truncated terms (the {MAX_TRUNCATIONS + 1}th at "
                               f"column {truncated[MAX_TRUNCATIONS].column}); a query may have "
                               f"{MAX_TRUNCATIONS} at most")
    notes = []
    if not any(t.tag is FREE for t in _positive(tree)):
        notes.append("the query has no untagged terms: it is ranked by BM25 over its tagged terms only, without "
                     "the dense leg")
    return ParsedQuery(query, tree, tuple(notes))


def read(query: str, syntax: str) -> ParsedQuery | None:
    """The parsed query under ``syntax`` (:data:`SYNTAXES`), or None where it is searched as plain text."""
    if syntax == "plain" or (syntax == "auto" and not has_syntax(query)):
        return None
    return parse(query)


# The grammar's tree into terms ----------------------------------------------------------------------------------
_PARSER = None


def _parser():  # a plain query never loads the grammar
    global _PARSER
    if _PARSER is None:
        from lark import Lark

        _PARSER = Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)
    return _PARSER


def _build(raw) -> Tree:
    """Terms and nodes from the grammar's tree; chains of one operator are flattened."""
    kind = raw.data
    if kind == "binary":
        left, operator, right = raw.children
        return _join(str(operator), _build(left), _build(right))
    if kind == "implicit":
        left, right = raw.children
        return _join("AND", _build(left), _build(right))
    if kind == "negation":
        return Node("NOT", (_build(raw.children[-1]),))
    if kind == "run":
        return _run(raw.children[0], raw.children[1] if len(raw.children) > 1 else None)
    if kind == "phrase":
        return _phrase(raw.children[0], raw.children[1] if len(raw.children) > 1 else None)
    raise QuerySyntaxError(f"query syntax: unexpected {kind}")  # the grammar has no other rule


def _join(op: str, left: Tree, right: Tree) -> Tree:
    parts = [*(left.children if isinstance(left, Node) and left.op == op else (left,)),
             *(right.children if isinstance(right, Node) and right.op == op else (right,))]
    return Node(op, tuple(parts))  # type: ignore[arg-type]


def _tag(token) -> Tag:
    if token is None:
        return FREE
    name = " ".join(str(token)[1:-1].split()).lower()
    if not name:
        raise QuerySyntaxError(f"query syntax: an empty field tag [] at column {token.column}")
    tag = TAGS.get(name)
    if tag is None:
        known = ", ".join(f"[{t}]" for t in ("ti", "ab", "tiab", "au", "mh", "majr", "ta", "pt", "dp", "pmid"))
        raise QuerySyntaxError(f"query syntax: unknown field tag [{name}] at column {token.column}; biorank knows "
                               f"{known}")
    return tag


def _run(token, tag_token) -> Tree:
    tag = _tag(tag_token)
    words = str(token).split()
    column = token.column
    if tag.kind == "text":
        terms = [_word(tag, word, column + _offset(str(token), i)) for i, word in enumerate(words)]
        return terms[0] if len(terms) == 1 else Node("AND", tuple(terms))
    return _value(tag, " ".join(words), column)


def _phrase(token, tag_token) -> Tree:
    tag = _tag(tag_token)
    text = " ".join(str(token)[1:-1].split())
    if not text:
        raise QuerySyntaxError(f'query syntax: an empty phrase "" at column {token.column}')
    if tag.kind == "text":
        return Term(tag, text, "phrase", token.column)
    return _value(tag, text, token.column)


def _word(tag: Tag, word: str, column: int) -> Term:
    """A word of a text tag, truncated where it ends in ``*``."""
    return _truncated(tag, word, column) if word.endswith("*") else Term(tag, word, "word", column)


def _value(tag: Tag, text: str, column: int) -> Term:
    """A whole value of a metadata tag: a heading, a journal, an author, a year or range, an id."""
    if tag.kind == "year":
        _years(text, column)
    if text.endswith("*") and tag.kind in ("keyword", "author"):
        return _truncated(tag, text, column)
    return Term(tag, text, "word", column)


def _truncated(tag: Tag, text: str, column: int) -> Term:
    stem = text.rstrip("*")
    if len(stem) < MIN_TRUNCATED:
        raise QuerySyntaxError(f"query syntax: a truncated term needs {MIN_TRUNCATED} characters before its * "
                               f"({text!r} at column {column})")
    return Term(tag, stem, "prefix", column)


_YEAR = re.compile(r"^(\d{4})(?:/\d{1,2}(?:/\d{1,2})?)?$")


def _years(text: str, column: int) -> tuple[int, int]:
    """``2015`` → (2015, 2015), ``2015:2024`` or ``2015/03:2024/12/31`` → (2015, 2024): PubMed's date ranges, read
    to the year (the index keeps a year)."""
    ends = [end.strip() for end in text.split(":")]
    matches = [_YEAR.match(end) for end in ends]
    if len(ends) > 2 or not all(matches):
        raise QuerySyntaxError(f"query syntax: a date [dp] is YEAR or FIRST:LAST (YYYY, YYYY/MM or YYYY/MM/DD), not "
                               f"{text!r} (column {column})")
    first, last = (int(m[1]) for m in (matches[0], matches[-1]))  # type: ignore[index]
    if first > last:
        raise QuerySyntaxError(f"query syntax: the date range {text!r} at column {column} is empty: its first year "
                               "is after its last")
    return first, last


def _offset(run: str, index: int) -> int:
    """Where the ``index``-th word of ``run`` starts in it."""
    return [m.start() for m in re.finditer(r"\S+", run)][index]


def _check_nesting(query: str) -> None:
    depth, quoted = 0, False
    for column, char in enumerate(query, 1):
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise QuerySyntaxError(f"query syntax: parentheses nested more than {MAX_DEPTH} deep at column "
                                       f"{column}")
        elif not quoted and char == ")":
            if depth == 0:
                raise QuerySyntaxError(f"query syntax: a ')' without its '(' at column {column}")
            depth -= 1
    if quoted:
        raise QuerySyntaxError(f"query syntax: a quote opened at column {query.rfind(chr(34)) + 1} is never "
                               "closed")
    if depth:
        raise QuerySyntaxError(f"query syntax: {depth} '(' never closed (the last at column "
                               f"{query.rfind('(') + 1})")


def _token_problem(token) -> str:
    if token.type in ("OPERATOR", "NOT"):
        return f"the operator {token} has no term before it"
    if token.type == "TAG":
        return f"the field tag {token} follows no term"
    if token.type == "RPAR":
        return "empty parentheses"
    return f"unexpected {str(token)[:40]!r}"


def _character_problem(query: str, position: int) -> str:
    char = query[position] if position < len(query) else ""
    if char == "[":
        return "a '[' never closed"
    if char == "]":
        return "a ']' without its '['"
    return f"unexpected {char!r}"


def _terms(tree: Tree) -> Iterator[Term]:
    if isinstance(tree, Term):
        yield tree
        return
    for child in tree.children:
        yield from _terms(child)


def _positive(tree: Tree) -> Iterator[Term]:
    """The terms not under a NOT: what the query asks for, not what it excludes."""
    if isinstance(tree, Term):
        yield tree
    elif tree.op != "NOT":
        for child in tree.children:
            yield from _positive(child)


# Terms into clauses ---------------------------------------------------------------------------------------------
def _clause(tree: Tree, stem: Callable[[str, str], str]) -> dict:
    if isinstance(tree, Term):
        return _term_clause(tree, stem)
    children = [_clause(child, stem) for child in tree.children]
    if tree.op == "AND":
        return {"bool": {"filter": children}}
    if tree.op == "OR":
        return {"bool": {"should": children, "minimum_should_match": 1}}
    return {"bool": {"must_not": children}}


def _any(clauses: list[dict]) -> dict:
    return clauses[0] if len(clauses) == 1 else {"bool": {"should": clauses, "minimum_should_match": 1}}


def _term_clause(term: Term, stem: Callable[[str, str], str]) -> dict:
    tag = term.tag
    if tag.kind == "text":
        if term.kind == "prefix":
            return _any([_prefix(f, stem(f, term.text)) for f in tag.fields])
        return _any([_match(term, f) for f in tag.fields])
    if tag.kind == "year":
        first, last = _years(term.text, term.column)
        return {"range": {"year": {"gte": first, "lte": last}}}
    if tag.kind == "id":
        return {"term": {"id": term.text}}
    if tag.kind == "author":
        # "Smith J" is also "Smith JA"; "Smith" is any Smith, not "Smithers".
        name = term.text
        if term.kind == "prefix":
            return _prefix("authors", name, case_insensitive=True)
        return _any([{"term": {"authors": {"value": name, "case_insensitive": True}}},
                     _prefix("authors", name + ("" if " " in name else " "), case_insensitive=True)])
    if term.kind == "prefix":
        return _any([_prefix(f, term.text, case_insensitive=True) for f in tag.fields])
    return _any([{"term": {f: {"value": term.text, "case_insensitive": True}}} for f in tag.fields])


def _match(term: Term, field_name: str) -> dict:
    if term.kind == "phrase":
        return {"match_phrase": {field_name: {"query": term.text, "zero_terms_query": "all"}}}
    # A word the analyser splits ("IL-6") needs all its pieces; a stop word alone ("the") excludes nothing.
    return {"match": {field_name: {"query": term.text, "operator": "and", "zero_terms_query": "all"}}}


def _prefix(field_name: str, value: str, *, case_insensitive: bool = False) -> dict:
    body: dict = {"value": value, "rewrite": f"top_terms_{MAX_EXPANSIONS}"}
    if case_insensitive:
        body["case_insensitive"] = True
    return {"prefix": {field_name: body}}
