#!/usr/bin/env python3
"""Copies the current text of every SQL function and view that the newest upgrade script
(sql/jobq--A--B.sql with the highest B; the earlier ones are released and never edited)
(re)creates from src/sql/*.sql into it, so that an upgraded database carries exactly a fresh
install's function bodies and view definitions (tests/upgrade.rs compares them). Run after
changing such a function or view:

    python3 scripts/sync-upgrade.py            # rewrites the upgrade script
    python3 scripts/sync-upgrade.py --check    # exit 1, naming them, if any copy is stale

A function is the text from its `CREATE [OR REPLACE] FUNCTION name(` line to the first line
after it that ends with `$$;`; a view, from `CREATE [OR REPLACE] VIEW name` to the first line
that ends with `;`. The upgrade script keeps its own `OR REPLACE`.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = max((ROOT / "sql").glob("jobq--*--*.sql"),
             key=lambda p: tuple(int(x) for x in p.stem.split("--")[2].split(".")))
HEAD = re.compile(r"^CREATE (OR REPLACE )?(FUNCTION|VIEW) ([\w.]+)[ (]", re.M)


def functions(text):
    """{name: (start, end, or_replace)} of every SQL-bodied function and every view in text."""
    found = {}
    heads = list(HEAD.finditer(text))
    for i, m in enumerate(heads):
        close = "$$;\n" if m.group(2) == "FUNCTION" else ";\n"
        end = text.find(close, m.end())
        limit = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        if 0 <= end < limit:  # a function without a $$ body (LANGUAGE c) is left alone
            found[m.group(3)] = (m.start(), end + len(close), bool(m.group(1)))
    return found


def main():
    check = "--check" in sys.argv[1:]
    source = {}
    for f in sorted((ROOT / "src" / "sql").glob("*.sql")):
        text = f.read_text()
        for name, (s, e, _) in functions(text).items():
            source[name] = re.sub(r"^CREATE OR REPLACE ", "CREATE ", text[s:e], count=1)
    script = SCRIPT.read_text()
    stale, out, pos = [], [], 0
    for name, (s, e, replace) in sorted(functions(script).items(), key=lambda kv: kv[1][0]):
        if name not in source:
            continue
        body = source[name]
        if replace:
            body = re.sub(r"^CREATE ", "CREATE OR REPLACE ", body, count=1)
        if script[s:e] != body:
            stale.append(name)
        out.append(script[pos:s])
        out.append(body)
        pos = e
    out.append(script[pos:])
    if check:
        if stale:
            print("stale in %s: %s" % (SCRIPT.name, ", ".join(stale)))
            sys.exit(1)
        return
    SCRIPT.write_text("".join(out))
    print("updated: %s" % (", ".join(stale) or "nothing"))


main()
