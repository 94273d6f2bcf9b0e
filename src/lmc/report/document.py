"""A tiny document model rendered twice: Markdown (figures referenced as files) and one
self-contained HTML page (figures embedded as base64 PNG data URIs, inline CSS, a table of
contents, no external resource).

Layout: the page is readable from a phone (viewport meta, fluid images, a narrow-screen
style) to a wide screen; tables scroll sideways inside their box (with a shadow cue at an edge
that hides columns) and wrap their headers; each figure is shown at its screen size
(``width`` px, at most the column) and links to its full-size file (``Image.full``, the SVG
beside the PNG), which opens on click when the report sits beside its ``figures/`` folder.

Inline markup in text: `code` and **bold** only.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

# ---- blocks ---------------------------------------------------------------------------------


@dataclass
class Heading:
    level: int  # 1 = title, 2 = section, 3 = subsection
    text: str
    anchor: str = ""


@dataclass
class Para:
    text: str


@dataclass
class Note:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Image:
    number: int
    file: str  # path relative to the report, e.g. figures/x.png
    title: str
    caption: str
    png: bytes = field(repr=False)
    full: str = ""  # the full-size file a click opens (relative), e.g. figures/x.svg
    width: int = 0  # display width in CSS pixels (0: the image's own)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    align: list[str] | None = None  # "l" or "r" per column
    footnote: str = ""  # shown under the table (e.g. what a † marks)
    wide: bool = False  # may be wider than the text column (scrolls inside its box)


@dataclass
class Code:
    text: str
    lang: str = ""


Block = Heading | Para | Note | Bullets | Image | Table | Code


def opening(title: str, record: dict) -> list[Block]:
    """A report's first blocks: its title, and the study's ``description`` when it has one
    (``record`` is ``study.json``'s or ``variants.json``'s contents)."""
    blocks: list[Block] = [Heading(1, title)]
    if record.get("description"):
        blocks.append(Para(str(record["description"])))
    return blocks


def slug(text: str, used: set[str]) -> str:
    """GitHub-style heading anchor (so the Markdown contents links work there too)."""
    base = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-") or "section"
    anchor, k = base, 1
    while anchor in used:
        anchor, k = f"{base}-{k}", k + 1
    used.add(anchor)
    return anchor


def assign_anchors(blocks: list[Block]) -> None:
    used: set[str] = set()
    for b in blocks:
        if isinstance(b, Heading) and not b.anchor:
            b.anchor = slug(b.text, used)


# ---- Markdown -------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    assign_anchors(blocks)
    out: list[str] = []
    toc = [b for b in blocks if isinstance(b, Heading) and b.level in (2, 3)]
    for i, b in enumerate(blocks):
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Note):
            out.append(f"> **Note.** {b.text}")
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Image):
            image = f"![Figure {b.number}: {b.title}]({b.file})"
            if b.full:
                image = f"[{image}]({b.full})"
            out.append(f"{image}\n\n*Figure {b.number}.* {b.caption}")
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(_md_cell(h) for h in b.header) + " |"]
            align = b.align or ["l"] * len(b.header)
            lines.append("|" + "|".join(" ---: " if a == "r" else " --- " for a in align) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            text = "\n".join(lines)
            if b.caption:
                text = f"{b.caption}\n\n{text}"
            if b.footnote:
                text = f"{text}\n\n{b.footnote}"
            out.append(text)
        elif isinstance(b, Code):
            out.append(f"```{b.lang}\n{b.text.rstrip()}\n```")
        if i == _toc_position(blocks):
            out.append(_markdown_toc(toc))
    return "\n\n".join(out) + "\n"


def _toc_position(blocks: list[Block]) -> int:
    """Index of the block after which the table of contents goes (before the first section)."""
    for i, b in enumerate(blocks):
        if isinstance(b, Heading) and b.level == 2:
            return i - 1
    return len(blocks) - 1


def _markdown_toc(headings: list[Heading]) -> str:
    lines = ["**Contents**", ""]
    for h in headings:
        indent = "  " * (h.level - 2)
        lines.append(f"{indent}- [{h.text}](#{h.anchor})")
    return "\n".join(lines)


# ---- HTML -----------------------------------------------------------------------------------
CSS = """
:root { --fg: #1d1d1f; --muted: #5a5a60; --rule: #d9d9de; --accent: #0b5cad; --bg-soft: #f5f6f8; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 16px/1.55 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1040px; margin: 0 auto; padding: 2rem 1.5rem 4rem; }
h1 { font-size: 1.9rem; line-height: 1.2; margin: 0 0 .6rem; }
h2 { font-size: 1.4rem; margin: 2.6rem 0 .8rem; padding-top: .6rem;
  border-top: 1px solid var(--rule); }
h3 { font-size: 1.12rem; margin: 1.8rem 0 .6rem; }
p, li { max-width: 48rem; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
code { font: .88em/1.4 "SFMono-Regular", Menlo, Consolas, monospace; background: var(--bg-soft);
  padding: .05em .3em; border-radius: 3px; }
pre { background: var(--bg-soft); padding: .9rem 1rem; border-radius: 6px; overflow-x: auto;
  font: 13px/1.45 "SFMono-Regular", Menlo, Consolas, monospace; }
pre code { background: none; padding: 0; }
nav.toc { background: var(--bg-soft); border-radius: 8px; padding: .8rem 1.2rem; margin: 1.4rem 0;
  max-width: 34rem; }
nav.toc ol { margin: .3rem 0; padding-left: 1.3rem; } nav.toc li { margin: .1rem 0; }
nav.toc > strong { font-size: .95rem; }
figure { margin: 1.6rem 0 2rem; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--rule);
  border-radius: 4px; }
figure a.full { display: inline-block; max-width: 100%; cursor: zoom-in; }
figcaption { color: var(--muted); font-size: .92rem; margin-top: .5rem; max-width: 52rem; }
.note { border-left: 4px solid #e0a100; background: #fff8e6; padding: .5rem .9rem;
  border-radius: 0 4px 4px 0; }
.table-wrap { overflow-x: auto; margin: .8rem 0 1.6rem; max-width: 100%;
  -webkit-overflow-scrolling: touch;
  background: linear-gradient(to right, #fff 30%, rgba(255,255,255,0)) left / 2rem 100%,
    linear-gradient(to left, #fff 30%, rgba(255,255,255,0)) right / 2rem 100%,
    radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.18), rgba(0,0,0,0)) left / .8rem 100%,
    radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.18), rgba(0,0,0,0)) right / .8rem 100%;
  background-repeat: no-repeat; background-attachment: local, local, scroll, scroll; }
.table-wrap.wide { width: max-content; max-width: min(1320px, 100vw - 2rem); position: relative;
  left: 50%; transform: translateX(-50%); }
table { border-collapse: collapse; font-size: .85rem; font-variant-numeric: tabular-nums; }
caption { text-align: left; color: var(--muted); padding-bottom: .4rem; caption-side: top; }
th, td { padding: .3rem .5rem; border-bottom: 1px solid var(--rule); }
td { white-space: nowrap; }
th { font-weight: 600; border-bottom: 2px solid #bcbcc4; vertical-align: bottom;
  white-space: normal; min-width: 4.2em; max-width: 8.5em; line-height: 1.25;
  background: rgba(234, 236, 240, .7); }
td.l { white-space: normal; min-width: 7em; }
td.r, th.r { text-align: right; } td.l, th.l { text-align: left; }
tbody tr:hover { background: rgba(240, 241, 245, .6); }
p.footnote { color: var(--muted); font-size: .86rem; margin: -1.2rem 0 1.6rem; }
@media (max-width: 700px) {
  body { font-size: 15px; }
  main { padding: 1rem .8rem 3rem; }
  h1 { font-size: 1.45rem; } h2 { font-size: 1.2rem; }
  table { font-size: .8rem; }
  th, td { padding: .25rem .35rem; }
  .table-wrap.wide { width: auto; left: auto; transform: none; }
}
"""


def _inline(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html_toc(headings: list[Heading]) -> str:
    parts = ['<nav class="toc"><strong>Contents</strong><ol>']
    open_sub = False
    for h in headings:
        link = f'<a href="#{h.anchor}">{_inline(h.text)}</a>'
        if h.level == 2:
            if open_sub:
                parts.append("</ol></li>")
                open_sub = False
            elif len(parts) > 1:
                parts.append("</li>")
            parts.append(f"<li>{link}")
        else:
            if not open_sub:
                parts.append("<ol>")
                open_sub = True
            parts.append(f"<li>{link}</li>")
    if open_sub:
        parts.append("</ol></li>")
    elif len(parts) > 1:
        parts.append("</li>")
    parts.append("</ol></nav>")
    return "".join(parts)


def to_html(blocks: list[Block], title: str) -> str:
    assign_anchors(blocks)
    toc = [b for b in blocks if isinstance(b, Heading) and b.level in (2, 3)]
    toc_at = _toc_position(blocks)
    body: list[str] = []
    for i, b in enumerate(blocks):
        if isinstance(b, Heading):
            body.append(f'<h{b.level} id="{b.anchor}">{_inline(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            body.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Note):
            body.append(f'<p class="note"><strong>Note.</strong> {_inline(b.text)}</p>')
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline(t)}</li>" for t in b.items) + "</ul>")
        elif isinstance(b, Image):
            alt = html.escape(f"Figure {b.number}: {b.title}")
            width = f' width="{b.width}"' if b.width else ""
            img = f'<img src="{data_uri(b.png)}" alt="{alt}"{width}>'
            if b.full:
                full = html.escape(b.full)
                img = (
                    f'<a class="full" href="{full}" title="open full size" '
                    f'target="_blank">{img}</a>'
                )
            body.append(
                f'<figure id="figure-{b.number}">{img}'
                f"<figcaption><strong>Figure {b.number}.</strong> {_inline(b.caption)}"
                "</figcaption></figure>"
            )
        elif isinstance(b, Table):
            align = b.align or ["l"] * len(b.header)
            head = "".join(f'<th class="{a}">{_inline(h)}</th>' for h, a in zip(b.header, align))
            rows = "".join(
                "<tr>"
                + "".join(f'<td class="{a}">{_inline(c)}</td>' for c, a in zip(r, align))
                + "</tr>"
                for r in b.rows
            )
            caption = f"<caption>{_inline(b.caption)}</caption>" if b.caption else ""
            footnote = f'<p class="footnote">{_inline(b.footnote)}</p>' if b.footnote else ""
            wrap = "table-wrap wide" if b.wide else "table-wrap"
            body.append(
                f'<div class="{wrap}"><table>{caption}<thead><tr>{head}</tr></thead>'
                f"<tbody>{rows}</tbody></table></div>{footnote}"
            )
        elif isinstance(b, Code):
            lang = f' class="language-{html.escape(b.lang)}"' if b.lang else ""
            code = html.escape(b.text.rstrip(), quote=False)
            body.append(f"<pre><code{lang}>{code}</code></pre>")
        if i == toc_at and toc:
            body.append(_html_toc(toc))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )
