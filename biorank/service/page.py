"""The search page: plain HTML from the server, usable without JavaScript and from the keyboard.

Every value from a user or an index goes through :func:`html.escape` (titles, sentences, the query itself);
snippets are cut at the query terms' offsets and the pieces escaped one by one, so a ``<`` in an abstract can
never become markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from biorank.types import SCORE_PARTS

DOWNLOAD_FORMATS = (("ris", "RIS"), ("bibtex", "BibTeX"), ("csv", "CSV"), ("pmids", "PMIDs"),
                    ("json", "JSON Lines"), ("trec", "TREC run"))
"""The results' download links (``/export``), in the order shown: (format, label)."""
FACET_LABELS = {"year": "Year", "journal": "Journal", "mesh": "MeSH", "pt": "Publication type"}
"""The facets the page shows (:mod:`biorank.stages.facets`), in order, with their labels."""
STYLE = """
body{font:16px/1.45 system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;color:#1d1d1f}
form{display:grid;grid-template-columns:repeat(auto-fit,minmax(11rem,1fr));gap:.5rem 1rem;align-items:end}
label{display:flex;flex-direction:column;font-size:.85rem}.wide{grid-column:1/-1}
input,select,button{font:inherit;padding:.3rem}.switch{flex-direction:row;gap:.4rem;align-items:center}
:focus-visible{outline:3px solid #0a58ca;outline-offset:2px}.error{color:#a40000;font-weight:600}
ol{padding-left:1.5rem}li.hit{margin:1rem 0}h2{font-size:1.05rem;margin:0}.meta,.scores,.timing{color:#555;
font-size:.85rem;margin:.15rem 0}mark{background:#ffe58a}ul.snippets{margin:.3rem 0;padding-left:1.1rem}
nav{display:flex;gap:1rem;margin:1rem 0}aside.facets p{margin:.15rem 0;font-size:.9rem}
"""


def render_page(form: Mapping[str, Any], result: Mapping[str, Any] | None, error: str | None, *,
                index: str = "", modes: Sequence[str] = (), key: str | None = None) -> str:
    """The whole page: the search form filled with ``form``, then ``error`` or the hits of ``result``."""
    query = str(form.get("q", ""))
    title = f"{query} — biorank" if query else "biorank"
    parts = [f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<style>{STYLE}</style></head><body>",
             f'<header><h1><a href="/">biorank</a></h1><p class="meta">searching index {escape(index)}</p></header>']
    if modes:
        parts.append(_form(form, modes, key))
    if error:
        parts.append(f'<p class="error" role="alert">{escape(error)}</p>')
    if result is not None:
        parts.append(_results(form, result, key))
    parts.append("</body></html>")
    return "".join(parts)


def _form(form: Mapping[str, Any], modes: Sequence[str], key: str | None) -> str:
    mode = form.get("mode", "hybrid")
    options = "".join(f'<option{" selected" if m == mode else ""}>{escape(m)}</option>' for m in modes)

    def checkbox(name: str, label: str) -> str:
        checked = " checked" if form.get(name) else ""
        return f'<label class="switch"><input type="checkbox" name="{name}" value="1"{checked}>{label}</label>'

    def text(name: str, label: str, value: str, hint: str = "") -> str:
        return (f'<label>{label}<input name="{name}" value="{escape(value)}" placeholder="{escape(hint)}" '
                f'autocomplete="off"></label>')

    hidden = f'<input type="hidden" name="key" value="{escape(key)}">' if key else ""
    return ('<form method="get" action="/" role="search">'
            f'<label class="wide">Query<input type="search" name="q" value="{escape(str(form.get("q", "")))}" '
            'required maxlength="4000" autofocus></label>'
            f'<label>Mode<select name="mode">{options}</select></label>'
            f'{checkbox("rerank", "Rerank")}{checkbox("snippets", "Snippets")}'
            f'{text("year", "Years", str(form.get("year", "")), "2015-2020")}'
            f'{text("journal", "Journal", _first(form.get("journal", ())), "Fertility and sterility")}'
            f'{text("mesh", "MeSH heading", _first(form.get("mesh", ())), "Humans")}'
            f'{text("publication_type", "Publication type", _first(form.get("publication_type", ())), "Review")}'
            f'{_reorder_controls(form)}{hidden}<button type="submit">Search</button></form>')


def _first(values: Sequence[str]) -> str:
    """The page has one field for each list the API takes."""
    return values[0] if values else ""


def _results(form: Mapping[str, Any], result: Mapping[str, Any], key: str | None) -> str:
    hits = result["hits"]
    ms = result.get("ms", {})
    timing = " · ".join(f"{stage.replace('_', ' ')} {value:.0f} ms" for stage, value in ms.items())
    summary = f'{escape(result["system"])}' + (f', only {escape(result["filters"])}' if result.get("filters") else "")
    parts = [f'<p class="timing">{summary} — {timing}</p>']
    if result.get("parsed"):
        parts.append(f'<p class="meta">read as PubMed syntax: <code>{escape(result["parsed"])}</code></p>')
    parts += [f'<p class="meta">note: {escape(note)}</p>' for note in result.get("notes", ())]
    if not hits:
        parts.append('<p role="status">No documents match.</p>')
        return "".join(parts)
    if result.get("facets"):
        parts.append(_facets(form, result["facets"], key))
    first_rank = hits[0].get("rank", 1)
    parts.append(f'<ol start="{first_rank}" aria-label="results">')
    for hit in hits:
        parts.append(_hit(hit, key))
    parts.append("</ol>")
    if result.get("similar_to"):
        return "".join(parts)  # one document's nearest: a list of its own, no pages and no downloads
    page = int(result.get("page", 1))
    links = []
    if page > 1:
        links.append(f'<a rel="prev" href="{_page_url(form, page - 1, key)}">← previous</a>')
    links.append(f"<span>page {page}</span>")
    if result.get("more"):
        links.append(f'<a rel="next" href="{_page_url(form, page + 1, key)}">next →</a>')
    parts.append(f'<nav aria-label="pages">{"".join(links)}</nav>')
    downloads = " · ".join(f'<a href="{_page_url(form, page, key, path="/export", extra=(("format", fmt),))}">'
                           f"{label}</a>" for fmt, label in DOWNLOAD_FORMATS)
    parts.append(f'<p class="downloads">Download this page: {downloads}</p>')
    return "".join(parts)


def _facets(form: Mapping[str, Any], facets: Mapping[str, Any], key: str | None) -> str:
    """A line per facet: each value a link to the same search with that value as a filter (a year, a journal, a
    publication type instead of the one chosen; a MeSH heading beside those chosen, as headings must all hold)."""
    lines = []
    for name, label in FACET_LABELS.items():
        values = facets.get(name) or ()
        links = " · ".join(f'<a href="{_page_url(_narrowed(form, name, str(v["value"])), 1, key)}">'
                           f'{escape(str(v["value"]))}</a> {v["count"]}' for v in values)
        if links:
            lines.append(f'<p class="facet"><strong>{label}</strong> {links}</p>')
    return (f'<aside class="facets" aria-label="facets"><p class="facet">Among the top {facets["candidates"]} '
            f'documents:</p>{"".join(lines)}</aside>') if lines else ""


def _narrowed(form: Mapping[str, Any], facet: str, value: str) -> dict[str, Any]:
    """The form with a facet's value applied as a filter."""
    if facet == "year":
        return {**form, "year": value}
    if facet == "mesh":
        return {**form, "mesh": [*(m for m in form.get("mesh", ()) if m.lower() != value.lower()), value]}
    return {**form, {"journal": "journal", "pt": "publication_type"}[facet]: [value]}


def _hit(hit: Mapping[str, Any], key: str | None = None) -> str:
    title = _highlighted({"text": hit["title"], "matches": hit.get("title_matches", ())}) if hit.get("title") \
        else escape(hit["id"])
    heading = f'<a href="{escape(hit["url"])}">{title}</a>' if hit.get("url") else title
    meta = [escape(str(hit[k])) for k in ("journal", "year") if hit.get(k)] + [f"id {escape(hit['id'])}",
                                                                                _similar_link(hit["id"], key)]
    scores = " · ".join(f"{p} {hit[p]:.4g}" for p in SCORE_PARTS if isinstance(hit.get(p), int | float))
    snippets = "".join(f"<li>{_highlighted(s)} <small>({escape(s['section'])} "
                       f"{s['offsetInBeginSection']}-{s['offsetInEndSection']})</small></li>"
                       for s in hit.get("snippets", ()))
    return (f'<li class="hit"><h2>{heading}</h2><p class="meta">{" · ".join(meta)}</p>'
            f'<p class="scores">{scores}</p>' + (f'<ul class="snippets">{snippets}</ul>' if snippets else "") +
            "</li>")


def _highlighted(snippet: Mapping[str, Any]) -> str:
    text, out, at = snippet["text"], [], 0
    for begin, end in sorted(snippet.get("matches", ())):
        if begin < at:
            continue
        out += [escape(text[at:begin]), f"<mark>{escape(text[begin:end])}</mark>"]
        at = end
    out.append(escape(text[at:]))
    return "".join(out)


def _page_url(form: Mapping[str, Any], page: int, key: str | None, *, path: str = "/",
              extra: Sequence[tuple[str, str]] = ()) -> str:
    """The link to ``page`` of the form's search (``path`` ``/export`` with ``extra`` ``format``: its download)."""
    params: list[tuple[str, str]] = [("q", form.get("q", "")), ("mode", form.get("mode", "hybrid"))]
    params += [(name, "1") for name in ("rerank", "snippets") if form.get(name)]
    if form.get("year"):
        params.append(("year", form["year"]))
    params += [("journal", j) for j in form.get("journal", ())] + [("mesh", m) for m in form.get("mesh", ())]
    params += [("publication_type", t) for t in form.get("publication_type", ())]
    params += [("facets", "0")] if form.get("facets") is False else []
    params += _reorder_params(form)
    params += [("page", str(page)), *extra] + ([("key", key)] if key else [])
    return escape(f"{path}?" + urlencode(params))


def _similar_link(doc_id: str, key: str | None) -> str:
    """A hit's "similar articles" link: a plain GET of the page (the page runs no script)."""
    params = [("similar", doc_id)] + ([("key", key)] if key else [])
    return f'<a class="similar" href="{escape("/?" + urlencode(params))}">similar articles</a>'


def _reorder_controls(form: Mapping[str, Any]) -> str:
    """The form's sort, near-duplicates and MMR fields (:mod:`biorank.stages.diversity`)."""
    sort = form.get("sort", "relevance")
    options = "".join(f'<option value="{value}"{" selected" if value == sort else ""}>{label}</option>'
                      for value, label in (("relevance", "relevance"), ("date", "newest first")))
    checked = " checked" if form.get("dedupe") else ""
    return (f'<label>Sort<select name="sort">{options}</select></label>'
            f'<label class="switch"><input type="checkbox" name="dedupe" value="1"{checked}>Hide near-duplicates'
            '</label><label>Diversity (MMR λ)<input name="mmr" type="number" min="0" max="1" step="0.1" '
            f'value="{escape(str(form.get("mmr") or ""))}" placeholder="off"></label>')


def _reorder_params(form: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The sort, near-duplicates and MMR fields of a page's links, where they differ from the defaults."""
    params = [("sort", str(form["sort"]))] if form.get("sort", "relevance") != "relevance" else []
    params += [("dedupe", "1")] if form.get("dedupe") else []
    return params + ([("mmr", str(form["mmr"]))] if form.get("mmr") not in (None, "") else [])
