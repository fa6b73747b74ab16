"""report.html: the same markdown as report.md, rendered by a real markdown renderer
(markdown-it-py, CommonMark with GitHub tables) into one self-contained page.

Images the markdown links to are embedded as ``data:`` URIs, so the page can be mailed or
attached on its own. Raw HTML in the markdown is not passed through (it is escaped), with one
exception: a paragraph that is exactly ``<details><summary>TEXT</summary>`` or ``</details>`` (how a
report collapses a details table, which GitHub renders) becomes that element, TEXT escaped.

Every ``##`` and ``###`` heading gets GitHub's anchor for it (so links into report.md work in the
page too), and a table of contents of them follows the title. markdown-it-py has no anchors or
TOC of its own (mdit-py-plugins' ``anchors`` would add a dependency for the ids alone), so both
are made here from the parsed headings.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1200px; margin: 2em auto;
       padding: 0 1em; line-height: 1.45; color: #222; }
table { border-collapse: collapse; display: block; max-width: 100%; overflow-x: auto; font-size: 0.85em;
        margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; overflow-wrap: break-word; }
th { background: #f3f3f3; }
img { max-width: 100%; }
code { background: #f3f3f3; padding: 0 0.2em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
nav.toc { font-size: 0.9em; }
nav.toc ul { margin: 0.2em 0; }
blockquote { border-left: 4px solid #e0a030; margin: 1em 0; padding: 0.2em 1em; background: #fff8e6; }
"""


def _data_uri(path: Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


_OPEN = re.compile(r"<details><summary>([^<>]*)</summary>")
_CLOSE = "</details>"


def _collapsible(tokens: list[Token]) -> list[Token]:
    """The tokens with each ``<details>`` paragraph (module docstring) made an HTML block of its own
    writing: the paragraph's text is never passed through as HTML."""
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        if tokens[i].type == "paragraph_open" and i + 2 < len(tokens) and tokens[i + 1].type == "inline":
            text = tokens[i + 1].content.strip()
            opened = _OPEN.fullmatch(text)
            if opened or text == _CLOSE:
                content = (
                    f"<details><summary>{html.escape(opened[1], quote=False)}</summary>\n" if opened else "</details>\n"
                )
                out.append(Token("html_block", "", 0, content=content, block=True))
                i += 3  # paragraph_open, inline, paragraph_close
                continue
        out.append(tokens[i])
        i += 1
    return out


def _slug(text: str, used: set[str]) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens, and
    ``-1``, ``-2``, ... where the page already has it."""
    base = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
    slug, n = base, 0
    while slug in used:
        n += 1
        slug = f"{base}-{n}"
    used.add(slug)
    return slug


def _anchored(tokens: list[Token]) -> list[Token]:
    """The tokens with an id on each h2 and h3 and, after the first h1 (else first), a table of
    contents linking them: h3s nested under the h2 before them. No sections, no contents."""
    used: set[str] = set()
    groups: list[tuple[str, list[str]]] = []  # (h2 link, its h3 links)
    for token, inline in zip(tokens, tokens[1:], strict=False):
        if token.type != "heading_open" or token.tag not in ("h2", "h3"):
            continue
        text = "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))
        anchor = _slug(text, used)
        token.attrSet("id", anchor)
        link = f'<a href="#{anchor}">{html.escape(text, quote=False)}</a>'
        if token.tag == "h2" or not groups:
            groups.append((link, []))
        else:
            groups[-1][1].append(link)
    if not groups:
        return tokens
    lines = ['<nav class="toc">', "<ul>"]
    for link, subs in groups:
        lines += [f"<li>{link}", *(["<ul>", *(f"<li>{sub}</li>" for sub in subs), "</ul>"] if subs else []), "</li>"]
    toc = Token("html_block", "", 0, content="\n".join([*lines, "</ul>", "</nav>", ""]), block=True)
    title = next((i + 1 for i, t in enumerate(tokens) if t.type == "heading_close" and t.tag == "h1"), 0)
    return [*tokens[:title], toc, *tokens[title:]]


def render(markdown: str, base: Path, title: str) -> str:
    """The page for ``markdown``, its local images (paths relative to ``base``) embedded. An image
    file that does not exist keeps its link, so a broken reference stays visible, not silent."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = _anchored(_collapsible(md.parse(markdown)))
    for token in tokens:
        for child in token.children or []:
            if child.type == "image":
                src = str(child.attrGet("src") or "")
                local = base / src
                if src and "://" not in src and not src.startswith("data:") and local.is_file():
                    child.attrSet("src", _data_uri(local))
    body = md.renderer.render(tokens, md.options, {})
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )


def write(markdown_path: Path) -> Path:
    """Write the page beside ``markdown_path`` (report.md -> report.html) and return its path."""
    text = markdown_path.read_text()
    first = next((line for line in text.splitlines() if line.startswith("# ")), "# " + markdown_path.stem)
    path = markdown_path.with_suffix(".html")
    path.write_text(render(text, markdown_path.parent, first[2:].strip()))
    return path
