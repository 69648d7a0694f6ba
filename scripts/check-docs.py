#!/usr/bin/env python3
"""Checks the documentation's links: README.md, CHANGELOG.md and every docs/**/*.md.

For every relative link and image ([text](target), ![alt](target), [label]: target):
  - the target file or directory exists, inside the repository (links into src/, tests/ and
    the rest of the tree included);
  - an anchor (#section, on the same page or another) is the GitHub slug of a heading of the
    target page: lowercased, punctuation other than '-' and '_' dropped, spaces made '-',
    code spans and emphasis reduced to their text, and duplicate headings numbered -1, -2, ...
    as GitHub numbers them (explicit <a name|id="..."> anchors count too); on a file that is
    not Markdown only GitHub's line anchors (#L10, #L10-L20) are accepted.
Absolute paths (/x) and empty anchors are reported, since they do not render alike on every
forge. Links with a scheme (https:, mailto:) are not followed.
Also, a code span that is nothing but a repository path (`src/checkout.rs`, `tests/keys.rs`,
`bench/results/`) must name a file or directory that exists, so that prose does not point at
what was moved or removed.

Fenced code blocks are skipped. Prints each broken link as file:line, then one line:
    docs: N pages, M links checked, K broken
and exits 1 when K > 0.   Usage: scripts/check-docs.py [REPO_ROOT]
"""
import os
import re
import sys
import unicodedata
from urllib.parse import unquote

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# A code span naming a repository path, relative to the root.
REPO_PATH = re.compile(r"^(?:src|tests|bench|scripts|examples|dash|proxy|sql|docs|\.ci)/[A-Za-z0-9_.\-/]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
INLINE_LINK = re.compile(r"(!?)\[((?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*)\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>\n]*>|\S+)", re.M)
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)


def pages():
    out = [os.path.join(ROOT, p) for p in ("README.md", "CHANGELOG.md") if os.path.exists(os.path.join(ROOT, p))]
    for d, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    return out


def code_spans(text):
    """(start, end, content) of each code span in text (CommonMark: a backtick run closed by
    the next run of the same length)."""
    spans, i = [], 0
    while True:
        m = re.compile(r"`+").search(text, i)
        if not m:
            return spans
        run = m.group(0)
        close = re.compile(r"(?<!`)" + run + r"(?!`)").search(text, m.end())
        if not close:
            i = m.end()
            continue
        content = text[m.end():close.start()].replace("\n", " ")
        if content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        spans.append((m.start(), close.end(), content))
        i = close.end()


def blank(text, spans):
    """text with each span replaced by spaces (newlines kept, so offsets and lines hold)."""
    chars = list(text)
    for s, e, _ in spans:
        for k in range(s, e):
            if chars[k] != "\n":
                chars[k] = " "
    return "".join(chars)


def strip_fences(lines):
    """The lines with fenced code blocks blanked out (line numbers kept)."""
    out, fence = [], None
    for line in lines:
        if fence is None:
            m = FENCE.match(line)
            if m and not (m.group(2)[0] == "`" and "`" in m.group(3)):
                fence = m.group(2)
                out.append("")
                continue
            out.append(line)
        else:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                fence = None
            out.append("")
    return out


def heading_text(raw):
    """What GitHub renders of a heading's inline Markdown: link and image text, code span
    contents, no emphasis markers or HTML tags."""
    spans = code_spans(raw)
    parts, last = [], 0
    for s, e, content in spans:
        parts.append(("md", raw[last:s]))
        parts.append(("code", content))
        last = e
    parts.append(("md", raw[last:]))
    out = []
    for kind, piece in parts:
        if kind == "code":
            out.append(piece)
            continue
        piece = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", piece)   # links and images: their text
        piece = re.sub(r"<[^>]+>", "", piece)                       # HTML tags
        piece = re.sub(r"\\(.)", r"\1", piece)                      # escapes
        piece = piece.replace("*", "")                              # emphasis
        piece = re.sub(r"(?<![\w])_+|_+(?![\w])", "", piece)        # _emphasis_, not snake_case
        out.append(piece)
    return "".join(out)


def slug(text):
    s = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LNM":
            s.append(ch)
        elif ch == " ":
            s.append("-")
    return "".join(s)


_anchor_cache = {}


def anchors(path):
    """Every anchor GitHub makes for the Markdown file at path."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        lines = strip_fences(f.read().split("\n"))
    found, seen = set(), {}

    def add(raw):
        base = slug(heading_text(raw))
        candidate, n = base, seen.get(base, 0)
        while candidate in found:
            n += 1
            candidate = f"{base}-{n}"
        seen[base] = n
        found.add(candidate)

    for i, line in enumerate(lines):
        m = ATX.match(line)
        if m:
            add(m.group(2) or "")
        elif SETEXT.match(line) and i > 0 and lines[i - 1].strip() and not re.match(r"^\s*([|>#*+\-]|\d+[.)])", lines[i - 1]):
            add(lines[i - 1].strip())
        for a in HTML_ANCHOR.findall(line):
            found.add(a)
    _anchor_cache[path] = found
    return found


def check_target(page, target):
    """None when target (a link's destination on page) is fine, else why not."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    path = unquote(path.split("?", 1)[0])
    if "#" in target and not anchor:
        return "empty anchor"
    if path.startswith("/"):
        return "absolute path (write it relative to the page)"
    dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
    if os.path.commonpath([ROOT, dest]) != ROOT:
        return "outside the repository"
    if not os.path.exists(dest):
        return "no such file or directory"
    if not anchor:
        return None
    anchor = unquote(anchor)
    if os.path.isdir(dest):
        return "an anchor on a directory"
    if not dest.endswith(".md"):
        return None if LINE_ANCHOR.match(anchor) else "an anchor on a file that is not Markdown"
    if anchor not in anchors(dest):
        return f"no heading with anchor #{anchor} in {os.path.relpath(dest, ROOT)}"
    return None


def main():
    broken, links, checked_pages = [], 0, pages()
    for page in checked_pages:
        with open(page, encoding="utf-8") as f:
            text = "\n".join(strip_fences(f.read().split("\n")))
        spans = code_spans(text)
        rel = os.path.relpath(page, ROOT)

        def line_of(offset):
            return text.count("\n", 0, offset) + 1

        for s, _, content in spans:
            c = content.strip()
            if REPO_PATH.match(c) and not os.path.exists(os.path.join(ROOT, c)):
                broken.append(f"{rel}:{line_of(s)}: `{c}` names no file or directory of the repository")
        prose = blank(text, spans)
        found = [(m.start(), m.group(3)) for m in INLINE_LINK.finditer(prose)]
        found += [(m.start(), m.group(2)) for m in REF_DEF.finditer(prose)]
        for offset, target in sorted(found):
            links += 1
            why = check_target(page, target)
            if why:
                broken.append(f"{rel}:{line_of(offset)}: broken link ({target}): {why}")
    for b in broken:
        print(b)
    print(f"docs: {len(checked_pages)} pages, {links} links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
