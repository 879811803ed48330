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

STYLE = """
body{font:16px/1.45 system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;color:#1d1d1f}
form{display:grid;grid-template-columns:repeat(auto-fit,minmax(11rem,1fr));gap:.5rem 1rem;align-items:end}
label{display:flex;flex-direction:column;font-size:.85rem}.wide{grid-column:1/-1}
input,select,button{font:inherit;padding:.3rem}.switch{flex-direction:row;gap:.4rem;align-items:center}
:focus-visible{outline:3px solid #0a58ca;outline-offset:2px}.error{color:#a40000;font-weight:600}
ol{padding-left:1.5rem}li.hit{margin:1rem 0}h2{font-size:1.05rem;margin:0}.meta,.scores,.timing{color:#555;
font-size:.85rem;margin:.15rem 0}mark{background:#ffe58a}ul.snippets{margin:.3rem 0;padding-left:1.1rem}
nav{display:flex;gap:1rem;margin:1rem 0}
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
            f'{hidden}<button type="submit">Search</button></form>')


def _first(values: Sequence[str]) -> str:
    """The page has one field for each list the API takes."""
    return values[0] if values else ""


def _results(form: Mapping[str, Any], result: Mapping[str, Any], key: str | None) -> str:
    hits = result["hits"]
    ms = result.get("ms", {})
    timing = " · ".join(f"{stage.replace('_', ' ')} {value:.0f} ms" for stage, value in ms.items())
    summary = f'{escape(result["system"])}' + (f', only {escape(result["filters"])}' if result.get("filters") else "")
    parts = [f'<p class="timing">{summary} — {timing}</p>']
    parts += [f'<p class="meta">note: {escape(note)}</p>' for note in result.get("notes", ())]
    if not hits:
        parts.append('<p role="status">No documents match.</p>')
        return "".join(parts)
    first_rank = hits[0].get("rank", 1)
    parts.append(f'<ol start="{first_rank}" aria-label="results">')
    for hit in hits:
        parts.append(_hit(hit))
    parts.append("</ol>")
    page = int(result.get("page", 1))
    links = []
    if page > 1:
        links.append(f'<a rel="prev" href="{_page_url(form, page - 1, key)}">← previous</a>')
    links.append(f"<span>page {page}</span>")
    if result.get("more"):
        links.append(f'<a rel="next" href="{_page_url(form, page + 1, key)}">next →</a>')
    parts.append(f'<nav aria-label="pages">{"".join(links)}</nav>')
    return "".join(parts)


def _hit(hit: Mapping[str, Any]) -> str:
    title = escape(hit.get("title") or hit["id"])
    heading = f'<a href="{escape(hit["url"])}">{title}</a>' if hit.get("url") else title
    meta = [escape(str(hit[k])) for k in ("journal", "year") if hit.get(k)] + [f"id {escape(hit['id'])}"]
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


def _page_url(form: Mapping[str, Any], page: int, key: str | None) -> str:
    params: list[tuple[str, str]] = [("q", form.get("q", "")), ("mode", form.get("mode", "hybrid"))]
    params += [(name, "1") for name in ("rerank", "snippets") if form.get(name)]
    if form.get("year"):
        params.append(("year", form["year"]))
    params += [("journal", j) for j in form.get("journal", ())] + [("mesh", m) for m in form.get("mesh", ())]
    params += [("page", str(page))] + ([("key", key)] if key else [])
    return escape("/?" + urlencode(params))
