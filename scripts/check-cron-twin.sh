#!/usr/bin/env bash
# Compares the SQL edition's twins of src/schedules.rs (src/sql/twins/schedules.sql:
# jobq._cron_next, jobq._cron_latest) with the extension's Rust, case by case: the same tick,
# or the same error (SQLSTATE and message). Starts a cluster of its own (scripts/lib/pg.sh)
# with the jobq extension installed, loads the twins into a schema `twin`, and compares them
# on generated cases: expressions of every field form (lists, ranges, steps, names, L, W, #,
# ?, +, seconds, nicknames, Sunday as 0 and 7), zones with and without summer time (30- and
# 45-minute offsets, 30-minute and 2-hour shifts, changes at midnight), instants around each
# change of clock and at month and year ends, chains of consecutive ticks, random
# expressions, and invalid expressions, zones and times.
#
#     scripts/check-cron-twin.sh [BINDIR]    # default /usr/lib/postgresql/15/bin
#
# Prints the number of cases and of mismatches (the first ones in full) and the time of one
# call of each; exits 1 on any mismatch. Needs the jobq extension installed for that server
# (the twins are compared with it), python3, and root or the user postgres.
# Known differences, shown apart and not counted (the header of src/sql/twins/schedules.sql):
# a tick after 2099 in a zone with summer time (chrono-tz has none then, PostgreSQL has).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BINDIR=${1:-/usr/lib/postgresql/15/bin}
source scripts/lib/pg.sh

pg_throwaway "$BINDIR" cron-twin
psql_db() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d crontwin "$@"; }
psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE crontwin"
psql_db -c "CREATE EXTENSION jobq" -c "CREATE SCHEMA twin" -c "CREATE SCHEMA cmp"
# The twins, in schema twin instead of jobq.
sed -e 's/\bjobq\._cron_/twin._cron_/g' -e 's/search_path = pg_catalog, jobq, pg_temp/search_path = pg_catalog, twin, pg_temp/' \
    src/sql/twins/schedules.sql | psql_db -f - >/dev/null

# The expressions, by group (TSV, COPY's escapes): handwritten ones, then random ones.
python3 - >"$pg_tmp/exprs.tsv" <<'PY'
import random

def esc(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")

out = []
def add(group, *exprs):
    for e in exprs:
        out.append((group, e))

# Valid expressions, looked at on calendar instants in several zones.
add("cal",
    "* * * * *", "*/15 * * * *", "0 * * * *", "0 0 * * *", "0 9-17/4 * * mon-fri", "0 0 1,15 jan *",
    "0 0 13 * fri", "0 0 29 2 *", "0 0 * * 0", "0 0 * * 7", "5-59/5 * * * *", "*/20 * * * *", "0,30 * * * *",
    "45 23 * * 6", "0 12 * * sun", "0 0 L * *", "0 0 LW * *", "0 0 15W * *", "0 0 1W * *", "0 0 31W * *",
    "0 0 30W * *", "0 0 28W 2 *", "0 0 29W 2 *", "0 0 * * 5L", "0 0 * * 1#1", "0 0 * * 1#5", "0 0 * * 0#2",
    "0 0 * * 7#3", "0 0 * * 7L", "0 0 * * 0L", "0 0 ? * mon", "0 0 1 * ?", "0 0 ? * ?", "0 0 13 * +5",
    "0 0 1-7 * +1", "0 0 L * 5", "0 0 L * +5", "0 0 LW * 1", "0 0 15W * 3", "0 0 1 1 *", "59 23 31 12 *",
    "0 0 31 * *", "0 0 30 * *", "0 0 29 * *", "0 0 28-31 * *", "0 0 * 2 1#5", "0 0 29 2 +1", "0 0 29 2 1",
    "0 0 * * 1-5#2", "0 0 * * 1-5#L", "0 0 * * */2#3", "0 0 * * 5LL", "0 0 * * 1#05", "0 0 1,15 * 1#1,5L",
    "0 0 L,LW * *", "0 0 L,15 * *", "0 0 1W,15W,L * *", "0 0 6W * *", "0 0 2W * *", "0 0 3W * *",
    "0 12 * * 1,3,5", "0 12 * * 1-3,5-6", "0 12 1-10/3 * *", "0 12 */10 * *", "0 12 */31 * *",
    "0 12 * */3 *", "0 12 1 1-12/5 *", "*/65535 * * * *", "*/60 * * * *", "*/59 * * * *",
    "0 0 * jan-mar mon-fri", "0 0 * * SAT-SUN", "0 0 * * sun-sat", "0 0 * * fri-sun", "0 0 * feb,aug *",
    "0 0 1 dec *", "0 0 * * jan", "0 0 1 mon *", "0 0 * * 5-7", "0 0 * * 0-7", "0 0 * * 7-7",
    "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly", "@YEARLY", "@Daily", "  @hourly  ",
    "0\t0 * * *", " 0  0   * * * ", "0 0 * * *\n", "0\u00a00 * * *", "0\u30000 * * *",
    "*/5 * * * * *", "* * * * * *", "30 30 2 * * *", "0 0 2 * * *", "0 30 1 * * *", "*/10 * 2 * * *",
    "15,45 * * * * *", "0-10/3 * * * * *", "59 59 23 * * *", "0 0 0 1 1 *", "30 * * * * *",
    "1,,2 * * * *", ",5 * * * *", "00 09 01 01 *", "0000005 * * * *", "MON * * * *", "JAN 1 * * *",
    "5-5 * * * *", "5,5 3 * * *", "0-0/2 0 * * *", "0 0 */1 * 1", "0 0 * * */1", "0 0 1-31 * 1",
    "*/7 */5 * * *", "0 0 1 */2 */2", "0 0 31 1,3,5 *", "0 0 1 1 0", "0 0 29 2 0#5", "0 0 L 2 *",
    "0 0 LW 2 *", "0 0 15 * +?", "0 0 ? * +1", "0 0 1 * +*")
# Expressions whose ticks the changes of clock move: every zone, instants around each change.
add("dst",
    "* * * * *", "*/15 * * * *", "*/20 * * * *", "*/30 * * * *", "*/7 * * * *", "0 * * * *", "0 */2 * * *",
    "30 2 * * *", "30 1 * * *", "0 2 * * *", "0 3 * * *", "15 2 * * *", "45 1 * * *", "0 1 * * *",
    "0 0 * * *", "30 0 * * *", "59 23 * * *", "30 2 * * 0", "0,30 2 * * *", "30 2 8 3 *", "30 2 29 3 *",
    "0 2 * * 0L", "0 1-3 * * *", "30 1,2 * * *", "1 1 1 * * *", "30 30 2 * * *", "*/10 * 2 * * *",
    "* * 2 * * *", "*/20 * * * * *", "0 0 2 * * *", "59 59 1 * * *", "0 0 3 * * *", "0 30 2 * * *",
    "0,15,30,45 1-2 * * *", "0 3 * * *", "30 3 * * *", "50 2 * * *", "45 2 * * *", "15 3 * * *",
    "*/10 * * * *", "0 30 1 * * *", "0 12 * * *", "@hourly", "@daily", "0 0 L * *", "0 2 LW * *",
    "0 2 * * 1#2", "30 2 * 3 0#2", "30 2 * 3 0L", "30 2 * 10 0L", "30 1 * 11 0#1", "0 2 15W * *",
    "30 2 1-31 * 0", "45 2 * * +0", "0 1,3 * * *", "*/45 1-3 * * *", "0 0-3 * * *", "59 0,1,2 * * *")
# Patterns that never come due (croner's search gives up).
add("never",
    "0 0 30 2 *", "0 0 31 4 *", "0 0 * * L", "0 0 , * *", ", * * * *", "0 0 31 2,4,6,9,11 *",
    "0 0 30W 2 *", "0 0 * * +", "0 0 31W 4 *", "0 0 30 2 +1", "0 0 * 2 0#5,1#5,2#5,3#5", "* , * * *")
# Invalid expressions.
add("err",
    "", "   ", "* * * *", "* * * * * * *", "61 * * * *", "* 24 * * *", "* * 32 * *", "* * * 13 *",
    "*/0 * * * *", "x * * * *", "@reboot", "@every 5s", "@daily x", "@", "daily", "@ daily", "@daily * * * * *",
    "5/10 * * * *", "/10 * * * *", "* * * * 1#6", "* * * * 1#0", "* * * * 1#", "* * * * #1", "* * * * 1#x",
    "1-2-3 * * * *", "5- * * * *", "-5 * * * *", "5-1 * * * *", "*/5/2 * * * *", "*/ * * * *",
    "1-60/5 * * * *", "1-5/65535 * * * *", "* * 5L * *", "* * L5 * *", "* * W * *", "* * 0W * *",
    "* * 32W * *", "* L * * *", "* * * * 8", "* * * * 1-8", "* * * * LL", "* * * * L5", "* * ? ? ?",
    "* * * * ++1", "* * * * 1+", "0 0 1,* * *", "** * * * *", "* * * * 1-5L", "0 0 * * 1#256",
    "0 0 * * 1#006", "99999 * * * *", "65535 * * * *", "65536 * * * *", "SUNDAY * * * *",
    "\u00df * * * *", "\uff11 * * * *", "* * * * * @", "0 0 * * * 2026", "0 0 * * MON#2#3", "0 0 * * 1#2L",
    "0 0 W5 * *", "0 0 5WL * *", "0 0 LW5 * *", "0 0 1-5W * *", "0 0 L-5 * *", "0 0 5-L * *",
    "0 0 */5L * *", "0 0 * * */5L", "0 0 * * 1-3/2#L", "0 0 * * */2#9", "*/0#9 * * * *", "1-5/0 * * * *",
    "1-5/x * * * *", "*/99999 * * * *", "5-/2 * * * *", "-/2 * * * *", "1-2-3/2 * * * *", "a-b * * * *",
    "0 0 ?5 * *", "0 0 * * ?5", "0 0 * * 5?", "0 0 * 1-13 *", "0 0 * 0 *", "0 0 0 * *", "0 0 * * -1",
    "0 0 1,32 * *", "1 2 3 4 5 6 7", "\t", "0 0 * * +L", "0 0 * * +8", "0 0 L * L")

# Random expressions, mostly valid.
rng = random.Random(20260329)
def num(lo, hi):
    return str(rng.randint(lo, hi))
def item(lo, hi, names=None):
    r = rng.random()
    if names and r < 0.12:
        a = rng.randint(0, len(names) - 1)
        if rng.random() < 0.5:
            return names[a]
        b = rng.randint(a, len(names) - 1)
        return names[a] + "-" + names[b]
    if r < 0.45:
        return num(lo, hi)
    if r < 0.65:
        a = rng.randint(lo, hi); b = rng.randint(a, hi)
        return "%d-%d" % (a, b)
    if r < 0.8:
        return "*/%d" % rng.randint(1, hi - lo + 1)
    a = rng.randint(lo, hi); b = rng.randint(a, hi)
    return "%d-%d/%d" % (a, b, rng.randint(1, max(1, b - a + 1)))
def field(lo, hi, names=None, star=0.4):
    if rng.random() < star:
        return "*"
    return ",".join(item(lo, hi, names) for _ in range(rng.choice([1, 1, 1, 2, 3])))
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
def dom():
    r = rng.random()
    if r < 0.5: return "*"
    if r < 0.55: return "?"
    if r < 0.6: return "L"
    if r < 0.64: return "LW"
    if r < 0.7: return "%dW" % rng.randint(1, 31)
    return field(1, 31, star=0)
def dow():
    r = rng.random()
    if r < 0.5: p = "*"
    elif r < 0.55: p = "?"
    elif r < 0.63: p = "%d#%d" % (rng.randint(0, 7), rng.randint(1, 5))
    elif r < 0.68: p = "%dL" % rng.randint(0, 7)
    else: p = field(0, 7, DAYS, star=0)
    if p != "*" and rng.random() < 0.1:
        p = "+" + p
    return p
def expr():
    f = [field(0, 59, star=0.3), field(0, 23, star=0.5), dom(), field(1, 12, MONTHS, star=0.7), dow()]
    if rng.random() < 0.25:
        f.insert(0, field(0, 59, star=0.3))
    s = " ".join(f)
    if rng.random() < 0.03:   # an invalid one now and then
        s = s.replace("1", "61", 1) if rng.random() < 0.5 else s.replace("*", "*/0", 1)
    return s
for _ in range(2000):
    add("rand", expr())

for g, e in out:
    print("%s\t%s" % (g, esc(e)))
PY

psql_db <<SQL
CREATE TABLE cmp.exprs (grp text, cron text);
\copy cmp.exprs FROM '$pg_tmp/exprs.tsv'
SQL

psql_db <<'SQL'
SET client_min_messages = warning;
SET TimeZone = 'UTC';

-- One call, its tick or its error (SQLSTATE and message), as text.
CREATE FUNCTION cmp.rust(fn text, cron text, tz text, ts timestamptz) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN CASE fn WHEN 'next' THEN jobq._cron_next(cron, tz, ts) ELSE jobq._cron_latest(cron, tz, ts) END::text;
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE FUNCTION cmp.twin(fn text, cron text, tz text, ts timestamptz) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN CASE fn WHEN 'next' THEN twin._cron_next(cron, tz, ts) ELSE twin._cron_latest(cron, tz, ts) END::text;
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
END $$;

CREATE TABLE cmp.zones (tz text, dst boolean);
INSERT INTO cmp.zones VALUES
    ('UTC', false), ('Europe/Paris', true), ('America/New_York', true), ('Australia/Lord_Howe', true),
    ('Asia/Kolkata', false), ('Pacific/Chatham', true), ('Europe/London', true), ('America/Santiago', true),
    ('America/Havana', true), ('Antarctica/Troll', true), ('Africa/Casablanca', true),
    ('Asia/Kathmandu', false), ('Australia/Adelaide', true), ('America/St_Johns', true),
    ('Europe/Dublin', true), ('CET', true), ('EST5EDT', true), ('US/Eastern', true), ('Etc/GMT+5', false),
    ('NZ', true), ('Asia/Tehran', false), ('EET', true), ('WET', true), ('MET', true);

-- Each zone's changes of clock in 2026: the first second of the new offset.
CREATE TABLE cmp.changes AS
WITH RECURSIVE hours AS (
    SELECT z.tz, h FROM cmp.zones z, generate_series(timestamptz '2026-01-01', '2027-01-01', '1 hour') h WHERE z.dst
), flagged AS (
    SELECT tz, h FROM hours
     WHERE (h AT TIME ZONE tz) - (h AT TIME ZONE 'UTC') <> ((h - interval '1 hour') AT TIME ZONE tz) - ((h - interval '1 hour') AT TIME ZONE 'UTC')
)
SELECT f.tz, (SELECT min(s) FROM generate_series(f.h - interval '1 hour' + interval '1 second', f.h, '1 second') s
               WHERE (s AT TIME ZONE f.tz) - (s AT TIME ZONE 'UTC') = (f.h AT TIME ZONE f.tz) - (f.h AT TIME ZONE 'UTC')) AS at
  FROM flagged f;

-- The cases: (group, function, expression, zone, instant).
-- (n: which half of the comparison a case is in, below.)
CREATE TABLE cmp.cases (grp text, fn text, cron text, tz text, ts timestamptz, n bigint GENERATED ALWAYS AS IDENTITY);
-- Calendar: month and year ends, leap days, ordinary days, in five zones, both functions.
INSERT INTO cmp.cases
SELECT 'cal', fn, e.cron, z.tz, (w AT TIME ZONE z.tz) + d
  FROM cmp.exprs e, (VALUES ('next'), ('latest')) f(fn),
       (VALUES ('UTC'), ('Europe/Paris'), ('America/New_York'), ('Asia/Kolkata'), ('Pacific/Chatham')) z(tz),
       unnest(ARRAY[timestamp '2026-01-01 00:00', '2026-01-31 23:59:59', '2026-02-28 23:59:59', '2026-03-01 00:00',
                    '2028-02-29 12:00', '2026-04-30 23:59:59', '2026-06-15 12:34:56', '2026-12-31 23:59:59',
                    '2027-01-01 00:00', '2026-07-04 09:00', '2026-09-30 23:00', '2099-12-31 23:59:59',
                    '2026-11-15 06:07:08', '1999-12-31 23:59:59', '2026-05-31 00:00:01']) w,
       unnest(ARRAY[interval '0', '0.5 second', '-0.000001 second']) d
 WHERE e.grp = 'cal';
-- Around every change of clock, in every zone with summer time: both functions.
INSERT INTO cmp.cases
SELECT 'dst', fn, e.cron, c.tz, c.at + d
  FROM cmp.exprs e, (VALUES ('next'), ('latest')) f(fn), cmp.changes c,
       unnest(ARRAY[interval '-2 hours', '-1 hour', '-3599 seconds', '-30 minutes', '-1 second', '-0.5 second',
                    '0', '0.5 second', '1 second', '30 minutes', '3599 seconds', '1 hour', '2 hours']) d
 WHERE e.grp = 'dst';
-- The same expressions from each zone's local midnight around the change (a daily walk).
INSERT INTO cmp.cases
SELECT 'dst', fn, e.cron, c.tz, ((c.at AT TIME ZONE c.tz)::date + d) AT TIME ZONE c.tz
  FROM cmp.exprs e, (VALUES ('next'), ('latest')) f(fn), cmp.changes c, generate_series(-1, 1) d
 WHERE e.grp = 'dst';
-- Never due, and errors: both functions, two zones.
INSERT INTO cmp.cases
SELECT e.grp, fn, e.cron, tz, timestamptz '2026-03-29 01:30:00+00'
  FROM cmp.exprs e, (VALUES ('next'), ('latest')) f(fn), (VALUES ('UTC'), ('Europe/Paris')) z(tz)
 WHERE e.grp IN ('never', 'err');
-- Random expressions, each in a random zone at random instants and around a random change.
INSERT INTO cmp.cases
SELECT 'rand', fn, e.cron, z.tz, t
  FROM (SELECT cron, row_number() OVER () AS n FROM cmp.exprs WHERE grp = 'rand') e
  CROSS JOIN (VALUES ('next'), ('latest')) f(fn)
  CROSS JOIN LATERAL (SELECT tz FROM cmp.zones ORDER BY md5(e.n::text || tz) LIMIT 1) z
  CROSS JOIN LATERAL (
      SELECT timestamptz '2025-01-01' + (('x' || left(md5(e.n::text || k), 8))::bit(32)::bigint % 157680000) * interval '1 second' AS t
        FROM generate_series(1, 4) k
      UNION ALL
      SELECT c.at + (k * 17 - 40) * interval '1 minute' FROM generate_series(1, 4) k,
             LATERAL (SELECT at FROM cmp.changes WHERE changes.tz = z.tz ORDER BY md5(e.n::text || at::text) LIMIT 1) c
  ) i;
-- Zones: valid and invalid names, and what PostgreSQL takes but jobq does not.
INSERT INTO cmp.cases
SELECT 'zone', fn, '0 12 * * *', tz, timestamptz '2026-07-01 00:00:00+00'
  FROM (VALUES ('next'), ('latest')) f(fn),
       unnest(ARRAY['', 'Mars/Olympus', 'utc+1', 'Europe/Paris ', 'utc', 'europe/paris', 'EST5', 'GMT+5', 'Etc/GMT+5',
                    'Etc/GMT-14', 'posix/Europe/Paris', 'Factory', 'localtime', 'posixrules', 'UTC', 'Z', 'PST',
                    'CET', 'EET', 'MET', 'WET', 'EST', 'MST', 'HST', 'GMT', 'GMT0', 'GMT-0', 'Greenwich', 'UCT',
                    'Universal', 'Zulu', 'US/Pacific-New', '+02:00', 'right/UTC', 'Asia/Calcutta', 'Europe/Kyiv',
                    'America/Argentina/ComodRivadavia', 'America/Coyhaique', 'Antarctica/Troll', 'Japan',
                    'Iceland', 'W-SU', 'NZ-CHAT', 'GB-Eire', 'Cuba', 'Pacific/Kanton', 'Asia/Ho_Chi_Minh']) tz;
-- Every IANA name chrono-tz knows (and PostgreSQL lists): one call each.
INSERT INTO cmp.cases
SELECT 'zone', 'next', '30 2 * * *', name, timestamptz '2026-03-15 00:00:00+00'
  FROM pg_timezone_names WHERE name NOT LIKE 'posix/%' AND name NOT IN ('Factory', 'localtime', 'posixrules');
-- Times: infinities, sub-seconds, far years.
INSERT INTO cmp.cases
SELECT 'time', fn, cron, tz, ts
  FROM (VALUES ('next'), ('latest')) f(fn),
       (VALUES ('*/15 * * * *'), ('0 0 1 1 *'), ('0 0 * * *'), ('* * * * * *'), ('bad')) e(cron),
       (VALUES ('UTC'), ('Asia/Kolkata')) z(tz),
       unnest(ARRAY[timestamptz 'infinity', '-infinity', '2026-01-01 00:00:00.999999+00', '2026-01-01 00:14:59.999999+00',
                    '1970-01-01 00:00:00+00', '1900-06-15 12:00:00+00', '0100-01-01 00:00:00+00',
                    '4999-12-31 12:00:00+00', '4999-06-01 00:00:00+00', '0002-01-01 00:00:00+00']) ts;

-- The chains: from a start, the Rust's ticks one after the other; each tick is an instant
-- to compare both functions at (exactly on it, and a microsecond before).
CREATE TABLE cmp.chain_starts AS
SELECT e.cron, z.tz, s.ts
  FROM (VALUES ('*/20 * * * *'), ('0 * * * *'), ('30 2 * * *'), ('30 1 * * *'), ('*/7 * * * *'),
               ('0 0 L * *'), ('0 0 * * 1#5'), ('@weekly'), ('0 30 2 * * *'), ('*/45 * * * * *'),
               ('0,30 1-3 * * *'), ('15 2 * * *'), ('45 2 * * *'), ('0 0 * * *')) e(cron),
       cmp.zones z,
       LATERAL (SELECT c.at + d AS ts FROM cmp.changes c, unnest(ARRAY[interval '-2 days', '-3 hours', '-10 minutes']) d
                 WHERE c.tz = z.tz
                 UNION SELECT timestamptz '2026-06-30 00:00:00+00') s;
DO $$
DECLARE
    c record;
    t timestamptz;
    r timestamptz;
BEGIN
    FOR c IN SELECT * FROM cmp.chain_starts LOOP
        t := c.ts;
        FOR i IN 1..12 LOOP
            INSERT INTO cmp.cases VALUES ('chain', 'next', c.cron, c.tz, t), ('chain', 'latest', c.cron, c.tz, t),
                                         ('chain', 'latest', c.cron, c.tz, t - interval '1 microsecond');
            r := jobq._cron_next(c.cron, c.tz, t);
            EXIT WHEN r IS NULL;
            t := r;
        END LOOP;
    END LOOP;
END $$;

-- Past 2099, where chrono-tz has no summer time and PostgreSQL has: a known difference.
INSERT INTO cmp.cases
SELECT 'known', fn, cron, tz, timestamptz '2150-07-01 00:00:00+00'
  FROM (VALUES ('next'), ('latest')) f(fn), (VALUES ('0 12 * * *'), ('30 2 * * *')) e(cron),
       (VALUES ('Europe/Paris'), ('America/New_York'), ('UTC')) z(tz);

CREATE TABLE cmp.results (LIKE cmp.cases, rust text, twin text, known boolean);
SQL

# Compare: the check's longest step (each case calls both, under an exception block each), so the
# cases are split in two halves, one session each, side by side.
pids=()
for half in 0 1; do
  psql_db -v half="$half" <<'SQL' &
SET client_min_messages = warning;
SET TimeZone = 'UTC';
INSERT INTO cmp.results (grp, fn, cron, tz, ts, n, rust, twin)
SELECT c.grp, c.fn, c.cron, c.tz, c.ts, c.n, cmp.rust(c.fn, c.cron, c.tz, c.ts), cmp.twin(c.fn, c.cron, c.tz, c.ts)
  FROM cmp.cases c WHERE c.n % 2 = :half;
SQL
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

psql_db <<'SQL'
SET TimeZone = 'UTC';
-- A difference is known (not counted) when a tick falls after 2099 in a zone with summer time.
UPDATE cmp.results SET known = rust IS DISTINCT FROM twin AND tz <> 'UTC'
   AND (CASE WHEN rust LIKE 'ERROR%' THEN ts ELSE rust::timestamptz END >= '2100-01-01'
        OR CASE WHEN twin LIKE 'ERROR%' THEN ts ELSE twin::timestamptz END >= '2100-01-01');
SQL

# Summary, timing, mismatches.
psql_db -At -F ' ' <<'SQL'
SET TimeZone = 'UTC';
SELECT 'cases: ' || count(*) || ' (' || count(*) FILTER (WHERE rust LIKE 'ERROR%') || ' of them errors), mismatches: '
       || count(*) FILTER (WHERE rust IS DISTINCT FROM twin AND NOT known)
       || ', known differences (not counted): ' || count(*) FILTER (WHERE known) FROM cmp.results;
SELECT '  ' || rpad(grp, 6) || ' ' || lpad(count(*)::text, 7) || ' cases, '
       || count(*) FILTER (WHERE rust IS DISTINCT FROM twin AND NOT known) || ' mismatches, '
       || count(*) FILTER (WHERE known) || ' known'
  FROM cmp.results GROUP BY grp ORDER BY grp;
SELECT 'MISMATCH ' || grp || ' ' || fn || '(' || quote_literal(cron) || ', ' || quote_literal(tz) || ', ' || quote_literal(ts::text) || E')\n  rust: ' || rust || E'\n  twin: ' || twin
  FROM cmp.results WHERE rust IS DISTINCT FROM twin AND NOT known ORDER BY grp, cron, tz, ts LIMIT 40;
SELECT 'known (a tick after 2099, no summer time in chrono-tz): ' || fn || '(' || quote_literal(cron) || ', ' || quote_literal(tz) || ', '
       || quote_literal(ts::text) || ') rust ' || rust || ', twin ' || twin
  FROM cmp.results WHERE known ORDER BY grp, cron, tz, ts LIMIT 5;
SQL

psql_db -At <<'SQL'
SET TimeZone = 'UTC';
-- The time of one call (valid cases that found a tick), each implementation in turn.
CREATE TEMP TABLE timed AS SELECT fn, cron, tz, ts FROM cmp.results WHERE rust NOT LIKE 'ERROR%' AND grp IN ('cal', 'dst', 'rand', 'chain')
 ORDER BY md5(cron || tz || ts::text || fn) LIMIT 20000;
DO $$
DECLARE
    n bigint := (SELECT count(*) FROM timed);
    t0 timestamptz;
    rust interval;
    twin interval;
BEGIN
    t0 := clock_timestamp();
    PERFORM count(CASE fn WHEN 'next' THEN jobq._cron_next(cron, tz, ts) ELSE jobq._cron_latest(cron, tz, ts) END) FROM timed;
    rust := clock_timestamp() - t0;
    t0 := clock_timestamp();
    PERFORM count(CASE fn WHEN 'next' THEN twin._cron_next(cron, tz, ts) ELSE twin._cron_latest(cron, tz, ts) END) FROM timed;
    twin := clock_timestamp() - t0;
    RAISE NOTICE 'one call, mean over % ticks: Rust % ms, twin % ms', n,
        round((extract(epoch FROM rust) * 1000 / n)::numeric, 3), round((extract(epoch FROM twin) * 1000 / n)::numeric, 3);
END $$;
SQL

mismatches=$(psql_db -At -c "SELECT count(*) FROM cmp.results WHERE rust IS DISTINCT FROM twin AND NOT known")
[ "$mismatches" = 0 ] || { echo "check-cron-twin: $mismatches mismatches" >&2; exit 1; }
echo "check-cron-twin: the twins answer as the Rust does"
