#!/usr/bin/env python3
"""Builds the SQL edition, jobq-sql--V.sql: jobq without its library, for servers where no
library can be installed (docs/sql-edition.md). One source for both editions: the file is the
extension's own SQL (src/sql/*.sql, in src/lib.rs's order) with each function the extension
does in Rust replaced by its SQL twin (src/sql/twins/<module>.sql, with src/sql/twins/pasted/NAME.sql
pasted where a line says `@paste NAME@`), then what only the SQL
edition has (src/sql/twins/edition.sql).

    python3 scripts/build-sql-edition.py [OUT]    # default: target/sql-edition/jobq-sql--V.sql

It refuses to build when a Rust function that SQL can call has no twin, or when anything of
the library (MODULE_PATHNAME) is left. tests/sql_edition.rs installs the file as a role that is
no superuser and compares its catalog with the extension's.

The file runs in one transaction under `psql -v ON_ERROR_STOP=1 -f`: a fresh database gets
jobq; a database that has this release already is left as it is; anything else (the extension
installed, an unknown release) is refused before anything changes; a database that has the
release before this one is upgraded in place (upgrade_from).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TWINS = SRC / "sql" / "twins"
PASTED = TWINS / "pasted"


def version():
    m = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    return m.group(1)


def statements(text):
    """Splits SQL text into statements (with the comments before each), minding quotes,
    dollar quotes and comments."""
    out, start, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i + 1
        elif text.startswith("/*", i):
            i = text.find("*/", i) + 2
        elif c == "'":
            i += 1
            while i < n:
                if text[i] == "'" and text.startswith("''", i):
                    i += 2
                elif text[i] == "'":
                    break
                else:
                    i += 1
            i += 1
        elif c == "$":
            m = re.match(r"\$[A-Za-z_]*\$", text[i:])
            if m:
                end = text.find(m.group(0), i + len(m.group(0)))
                i = end + len(m.group(0))
            else:
                i += 1
        elif c == ";":
            out.append(text[start:i + 1])
            start = i + 1
            i += 1
        else:
            i += 1
    if text[start:].strip():
        out.append(text[start:])
    return out


FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([\w.\"]+)\s*\(", re.I)


def defined(stmt):
    """The function a statement creates (schema-qualified as written, quotes removed), or None."""
    body = re.sub(r"^(\s*--[^\n]*\n|\s+)*", "", stmt)
    m = FUNCTION.match(body)
    return m.group(1).replace('"', "") if m else None


def rust_functions():
    """The functions of schema jobq the library defines with #[pg_extern]."""
    names = set()
    for f in SRC.glob("*.rs"):
        for m in re.finditer(r"#\[pg_extern(?:\(([^)]*)\))?\]\s*(?:///[^\n]*\n\s*)*(?:pub(?:\(crate\))?\s+)?fn\s+(\w+)", f.read_text()):
            attrs, fn = m.group(1) or "", m.group(2)
            named = re.search(r'name\s*=\s*"(\w+)"', attrs)
            names.add("jobq." + (named.group(1) if named else fn))
    return names


def shared_files():
    """src/sql's files in src/lib.rs's order (the bootstrap one first, as pgrx runs it)."""
    lib = (SRC / "lib.rs").read_text()
    files = re.findall(r'extension_sql_file!\("sql/(\w+\.sql)"[^;]*?\);', lib)
    boot = re.findall(r'extension_sql_file!\("sql/(\w+\.sql)"[^;]*?bootstrap[^;]*?\);', lib)
    return boot + [f for f in files if f not in boot]


def build():
    v = version()
    twin_files = sorted(p for p in TWINS.glob("*.sql") if p.name != "edition.sql")
    twins = {}
    twin_sql = []
    for p in twin_files:
        text = pasted(p.read_text()).replace("@VERSION@", v)
        twin_sql.append("-- ---- src/sql/twins/%s ----\n%s" % (p.name, text))
        for s in statements(text):
            name = defined(s)
            if name:
                twins[name if "." in name else "public." + name] = s
    # What SQL may call of the library: its #[pg_extern] functions, and the C functions src/sql
    # declares (the hot path). Each needs its twin.
    needed = set(rust_functions())
    files = shared_files()
    parts = []
    for f in files:
        text = (SRC / "sql" / f).read_text()
        kept = []
        for s in statements(text):
            if "MODULE_PATHNAME" in s:
                name = defined(s)
                needed.add(name if "." in name else "public." + name)
                continue
            if re.search(r"pg_extension_config_dump", s):
                continue
            kept.append(s)
        parts.append((f, "".join(kept)))
    missing = sorted(needed - set(twins))
    if missing:
        sys.exit("build-sql-edition: no SQL twin in src/sql/twins for: " + ", ".join(missing))
    body = []
    for f, text in parts:
        body.append("-- ---- src/sql/%s ----\n%s\n" % (f, text))
        if f == files[0]:
            body.extend(twin_sql)
    body.append("-- ---- src/sql/twins/edition.sql ----\n" + (TWINS / "edition.sql").read_text())
    install = "\n".join(body).replace("@extschema@.", "public.")
    previous, upgrade = upgrade_from(v, twins)
    if any("MODULE_PATHNAME" in x or "@extschema@" in x or "@paste " in x for x in (install, upgrade)):
        sys.exit("build-sql-edition: something of the library is left")
    tail = TAIL.replace("@UPGRADE@", upgrade).replace("@PREVIOUS@", previous)
    return v, HEAD.replace("@VERSION@", v) + install + tail.replace("@VERSION@", v)


def pasted(text):
    """Twin text with each line `@paste NAME@` replaced by src/sql/twins/pasted/NAME.sql (its
    header comment left out), at that line's indent: statements that two twins run in their own
    bodies, from one source, where a call of one function by the other would cost each job its
    layers (src/sql/twins/hot_path.sql says how much)."""
    def paste(m):
        lines = (PASTED / (m.group(2) + ".sql")).read_text().splitlines(True)
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        return "".join(m.group(1) + l if l.strip() else l for l in lines)
    return re.sub(r"^([ \t]*)@paste (\w+)@[ \t]*\n", paste, text, flags=re.M)


def or_replace(stmt):
    """A statement that creates a function, as CREATE OR REPLACE."""
    return re.sub(r"CREATE\s+FUNCTION", "CREATE OR REPLACE FUNCTION", stmt, count=1, flags=re.I)


def upgrade_from(v, twins):
    """The release before `v` and the SQL that brings its SQL edition to `v`: the extension's
    upgrade script sql/jobq--P--V.sql, each C function replaced by its SQL twin (src/sql/twins),
    then the SQL edition's own functions as they are now (the other twins, edition.sql's), the
    install's rule that leaves PUBLIC no function, and the new release's jobq._edition(). One
    source for both editions' upgrades, as for their installs; tests/sql_edition.rs checks that
    an upgraded database is a fresh one."""
    scripts = list((ROOT / "sql").glob("jobq--*--%s.sql" % v))
    if len(scripts) != 1:
        sys.exit("build-sql-edition: no single upgrade script to %s in sql/" % v)
    previous = scripts[0].stem.split("--")[1]
    out = ["-- ---- %s, with the SQL twins ----\n" % scripts[0].relative_to(ROOT)]
    for s in statements(scripts[0].read_text()):
        s = "\n".join(l for l in s.split("\n") if not l.startswith("\\echo "))
        if "pg_extension_config_dump" in s:
            continue
        if "MODULE_PATHNAME" in s:
            name = defined(s)
            twin = twins[name if "." in name else "public." + name]
            s = twin if "OR REPLACE" not in s.upper() else or_replace(twin)
        out.append(s)
    # The twins no C function stands for (the SQL edition's own helpers) as they are now.
    done = {defined(x) for x in out if "FUNCTION" in x}
    for n, t in twins.items():
        if n != "jobq._edition" and re.match(r"(\s*--[^\n]*\n)*\s*CREATE\s+FUNCTION", t) and n not in done \
                and n.replace("public.", "") not in done:
            out.append("\n" + or_replace(t))
    # And those of src/sql/twins/edition.sql, what only the SQL edition has, as they are now.
    for t in statements((TWINS / "edition.sql").read_text()):
        if defined(t):
            out.append("\n" + or_replace(t))
    # Nothing for PUBLIC on the functions this upgrade created (PostgreSQL gives PUBLIC EXECUTE
    # on every new one): src/sql/privileges.sql's rule for a fresh install, run again.
    out += [s for s in statements((SRC / "sql" / "privileges.sql").read_text()) if "FROM PUBLIC', f)" in s]
    edition = [s for n, s in twins.items() if n == "jobq._edition"][0]
    out.append("\n" + or_replace(edition) + "\n")
    return previous, "".join(out).replace("@extschema@.", "public.")


HEAD = r"""-- jobq @VERSION@, the SQL edition: jobq without its library, for servers where no library can be
-- installed (docs/sql-edition.md). Built by scripts/build-sql-edition.py from src/sql; do not edit.
--
--     psql -v ON_ERROR_STOP=1 -f jobq-sql--@VERSION@.sql "$DATABASE_URL"
--
-- by a role that owns the database (or may create in it and in schema public) and has
-- CREATEROLE; no superuser. One transaction: a file that fails changes nothing. Run again, it
-- changes nothing.
\set ON_ERROR_STOP 1
BEGIN;
SET LOCAL check_function_bodies = off;
SET LOCAL client_min_messages = warning;
SET LOCAL search_path = public, pg_catalog;

DO $jobq$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        RAISE EXCEPTION 'jobq: the jobq extension is installed in database "%"; the SQL edition goes where it is not', current_database()
            USING ERRCODE = '55000';
    END IF;
    IF to_regprocedure('jobq._edition()') IS NULL AND to_regnamespace('jobq') IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: database "%" has a schema jobq that is not the SQL edition''s', current_database()
            USING ERRCODE = '55000';
    END IF;
    IF NOT (SELECT rolsuper OR rolcreaterole FROM pg_catalog.pg_roles WHERE rolname = current_user)
       AND EXISTS (SELECT 1 FROM unnest(ARRAY['jobq_reader', 'jobq_producer', 'jobq_worker', 'jobq_admin']) r
                    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r)) THEN
        RAISE EXCEPTION 'jobq: role "%" may not create jobq''s roles', current_user
            USING ERRCODE = '42501', HINT = 'Install as a role with CREATEROLE (rds_superuser, cloudsqlsuperuser, azure_pg_admin, ...).';
    END IF;
END $jobq$;

SELECT to_regprocedure('jobq._edition()') IS NULL AS jobq_fresh \gset
\if :jobq_fresh
"""

TAIL = r"""
\else
SELECT e.version = '@VERSION@' AS jobq_same, e.version = '@PREVIOUS@' AS jobq_previous,
       e.version AS jobq_installed FROM jobq._edition() e \gset
\if :jobq_same
\echo jobq @VERSION@ (SQL edition) is installed already: nothing changed
\elif :jobq_previous
@UPGRADE@
\echo jobq @PREVIOUS@ (SQL edition) upgraded to @VERSION@
\else
SELECT set_config('jobq.installed', :'jobq_installed', true) AS jobq_installed \gset
DO $jobq$ BEGIN
    RAISE EXCEPTION 'jobq: this file installs jobq @VERSION@ and has no upgrade from %', current_setting('jobq.installed')
        USING ERRCODE = '55000', HINT = 'Run the files of the releases in between first, in order.';
END $jobq$;
\endif
\endif
COMMIT;
"""


def main():
    v, text = build()
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "sql-edition" / ("jobq-sql--%s.sql" % v)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(out)


main()
