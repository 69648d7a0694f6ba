#!/usr/bin/env python3
"""Runs docs/getting-started.md as a reader would, block by block, in page order, on this
machine: Debian's PostgreSQL 15 cluster 15/main (port 5432), the packages of target/packages/
(scripts/package.sh 15 builds them; scripts/test.sh runs this right after
scripts/test-package.sh 15). Run as root, from anywhere:

    scripts/test-getting-started.py [PAGE]        (default: docs/getting-started.md)

The fenced blocks, by info string (fences of ``` or ~~~, indented or not, as tests/docs.rs
reads them; a block of any other language, or with `norun`, is shown only):
  ```sh             run by bash -e -o pipefail from the repository's root, as root, stdin empty;
                    must exit 0.
  ```sql            run by psql (ON_ERROR_STOP) as the superuser postgres in database `app`
                    (the page's, created by its own commands); must succeed.
  ```sql error=C    must fail with SQLSTATE C.
  ```python         run by the Python of the virtual environment the page makes (the path of
                    its `python3 -m venv PATH` command); must exit 0.
  ```LANG drains=Q  (python or sh) a worker that runs until stopped: started in the background,
                    it must, while alive, leave no job of queue Q due or executing and complete
                    at least one job of Q; then it gets SIGTERM and must exit (0, or by the
                    signal) within 30 s.
  ```LANG serves=U  (sh or python) a server that runs until stopped: started in the background,
                    it must answer HTTP GET U with 200 while alive; then SIGTERM, as above.
  ```LANG norun     shown only (for sql, as tests/docs.rs reads it).
The commands run with HOME set to a temporary directory (the page's ~/jobq-venv goes there),
and DEBIAN_FRONTEND=noninteractive. The first block that fails stops the run: its page line,
command and output are printed, and the script exits 1.

What it changes, and puts back at the end (or at the start of the next run, should this one be
killed: the record is in /var/tmp/jobq-getting-started/):
  - the page's packages (the .deb files its sh blocks name) are removed again; any of them
    installed before the run is removed first, so that the page's install is the one tested;
    files the packages overwrite that no package owned (a `cargo pgrx install`'s) are put back;
  - cluster 15/main: its postgresql.conf is restored, the databases and roles the page created
    (app, its login roles, the roles CREATE EXTENSION jobq made) are dropped, and the cluster is
    left running or stopped as it was (restarted, to drop the preload); a cluster that did not
    exist before (apt created it) is dropped;
  - the background processes (workers, dashboard) are stopped, the temporary HOME removed.
Debian packages the page's apt commands pulled in (postgresql-15, python3-venv) are kept.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PG_VERSION, PG_CLUSTER = "15", "main"
CONF = f"/etc/postgresql/{PG_VERSION}/{PG_CLUSTER}/postgresql.conf"
DATABASE = "app"
STATE = "/var/tmp/jobq-getting-started"
PATIENCE = 90          # seconds a background block has to reach its condition
STOP_PATIENCE = 30     # seconds it has to exit after SIGTERM
FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")


class Failure(Exception):
    pass


def log(msg):
    print(f"getting-started: {msg}", flush=True)


# ---- the page -------------------------------------------------------------------------------

class Block:
    def __init__(self, line, lang, options, text):
        self.line, self.lang, self.options, self.text = line, lang, options, text

    def where(self):
        return f"{PAGE_NAME}:{self.line}"


def blocks(text):
    """The fenced blocks of a Markdown page: (line of the opening fence, language, options,
    text), fences of ``` or ~~~, indented or not (the indentation of the fence is removed from
    its lines), as tests/docs.rs reads them."""
    out, open_ = [], None
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.lstrip()
        indent = len(raw) - len(stripped)
        if open_ is None:
            m = FENCE.match(stripped)
            if m and len(set(m.group(1))) == 1:
                words = m.group(2).split()
                open_ = {"fence": m.group(1), "indent": indent, "line": n,
                         "lang": words[0] if words else "", "options": words[1:], "lines": []}
        else:
            fence = open_["fence"]
            if stripped.startswith(fence) and set(stripped.rstrip()) == {fence[0]}:
                out.append(Block(open_["line"], open_["lang"], parse_options(open_), "\n".join(open_["lines"]) + "\n"))
                open_ = None
            else:
                cut = min(len(raw) - len(raw.lstrip()), open_["indent"])
                open_["lines"].append(raw[cut:])
    if open_ is not None:
        raise Failure(f"{PAGE_NAME}:{open_['line']}: a fenced block is not closed")
    return out


def parse_options(o):
    opts = {}
    if o["lang"] not in ("sh", "sql", "python"):
        return {"norun": True}
    for w in o["options"]:
        key, _, value = w.partition("=")
        ok = (key == "norun" and not value) or (key == "error" and value and o["lang"] == "sql") \
            or (key in ("drains", "serves") and value and o["lang"] in ("sh", "python"))
        if not ok:
            raise Failure(f"{PAGE_NAME}:{o['line']}: unknown option {w!r} of a {o['lang']} block")
        opts[key] = value or True
    if "drains" in opts and "serves" in opts:
        raise Failure(f"{PAGE_NAME}:{o['line']}: drains= and serves= together")
    return opts


# ---- commands -------------------------------------------------------------------------------

def run(cmd, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.STDOUT)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def must(cmd, what, **kw):
    r = run(cmd, **kw)
    if r.returncode != 0:
        raise Failure(f"{what}: {' '.join(cmd)} exited {r.returncode}\n{r.stdout}")
    return r.stdout


def psql(sql, db="postgres", check=True):
    """SQL as the superuser postgres over the cluster's socket; the output, unaligned."""
    r = run(["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-p", cluster_port(), "-d", db], input=sql, cwd="/")
    if check and r.returncode != 0:
        raise Failure(f"psql in {db}: {r.stdout}\n{sql}")
    return r.stdout.strip()


def cluster_info():
    """(port, status) of cluster 15/main, or None when it does not exist."""
    r = run(["pg_lsclusters", "-h"])
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == PG_VERSION and f[1] == PG_CLUSTER:
            return f[2], f[3]
    return None


def cluster_port():
    info = cluster_info()
    return info[0] if info else "5432"


def page_debs(page_blocks):
    """The .deb files the page's sh blocks install, as absolute paths."""
    debs = []
    for b in page_blocks:
        if b.lang == "sh" and "norun" not in b.options:
            debs += [os.path.normpath(os.path.join(REPO, d)) for d in re.findall(r"\S+\.deb\b", b.text)]
    return debs


def deb_package(path):
    return must(["dpkg-deb", "-f", path, "Package"], f"read {path}").strip()


def installed(pkg):
    r = run(["dpkg-query", "-W", "-f=${Status}", pkg])
    return r.returncode == 0 and "install ok installed" in r.stdout


# ---- the record of what to put back -----------------------------------------------------------

def save(state):
    with open(os.path.join(STATE, "state.json"), "w") as f:
        json.dump(state, f, indent=1)


def prepare(debs, tmp):
    """Records the machine's state in STATE (removing what the page must install itself)."""
    os.makedirs(os.path.join(STATE, "files"))
    # cluster: None until looked at, then {"existed": ..., "running": ...}; roles and databases:
    # None until listed (nothing is dropped before they are).
    state = STATE_NOW
    state.update({"packages": [], "files": [], "cluster": None, "conf": False, "roles": None, "databases": None,
                  "tmp": tmp, "groups": []})
    save(state)
    state["packages"] = [deb_package(d) for d in debs]
    save(state)
    before = [p for p in state["packages"] if installed(p)]
    if before:
        log(f"removing {' '.join(before)}, installed before the run (the page installs them)")
        must(["dpkg", "-r", *before], "dpkg -r")
    # Files of the packages that exist already, owned by no package: kept, to put back.
    for d in debs:
        listing = must(["dpkg-deb", "-c", d], f"list {d}")
        for line in listing.splitlines():
            path = line.split()[-1].lstrip(".")
            if line.startswith("-") and os.path.isfile(path) and run(["dpkg", "-S", path]).returncode != 0:
                dest = os.path.join(STATE, "files", path.lstrip("/"))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(path, dest)
                state["files"].append(path)
    save(state)
    info = cluster_info()
    if info and os.path.exists(CONF):
        shutil.copy2(CONF, os.path.join(STATE, "postgresql.conf"))
        state["conf"] = True
    state["cluster"] = {"existed": info is not None, "running": info is not None and info[1] == "online"}
    save(state)
    if info:
        if info[1] != "online":
            must(["pg_ctlcluster", PG_VERSION, PG_CLUSTER, "start"], "start cluster 15/main")
        state["roles"] = psql("SELECT rolname FROM pg_roles").split("\n")
        state["databases"] = psql("SELECT datname FROM pg_database").split("\n")
        save(state)
        if DATABASE in state["databases"]:
            raise Failure(f"cluster {PG_VERSION}/{PG_CLUSTER} has a database {DATABASE} already, which the page "
                          f"creates: drop it first (su - postgres -c 'dropdb {DATABASE}')")
    else:
        state["roles"] = state["databases"] = []   # a cluster apt makes is dropped whole
        save(state)
    return state


def restore(state):
    """Puts back what prepare() recorded; each step on its own, so that one failing does not
    keep the others from running. Returns the problems met."""
    problems = []

    def step(what, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (every step is tried)
            problems.append(f"{what}: {e}")

    info, cluster = cluster_info(), state.get("cluster")
    if cluster and cluster["existed"] and info:
        if info[1] != "online":
            step("start the cluster", lambda: must(["pg_ctlcluster", PG_VERSION, PG_CLUSTER, "start"], "start"))

        def drop_new():
            for db in psql("SELECT datname FROM pg_database").split("\n"):
                if db and db not in state["databases"]:
                    psql(f'DROP DATABASE "{db}" WITH (FORCE)')
            for role in psql("SELECT rolname FROM pg_roles").split("\n"):
                if role and role not in state["roles"]:
                    psql(f'DROP ROLE "{role}"')
        if state.get("roles") is not None and state.get("databases") is not None:
            step("drop the page's databases and roles", drop_new)
        if state.get("conf"):
            step("restore postgresql.conf", lambda: shutil.copy2(os.path.join(STATE, "postgresql.conf"), CONF))
        if cluster["running"]:
            step("restart the cluster", lambda: must(["pg_ctlcluster", PG_VERSION, PG_CLUSTER, "restart"], "restart"))
        else:
            step("stop the cluster", lambda: must(["pg_ctlcluster", PG_VERSION, PG_CLUSTER, "stop"], "stop"))
    elif cluster and not cluster["existed"] and info:
        # The cluster did not exist before the run: apt made it for the page.
        step("drop the cluster apt created", lambda: must(["pg_dropcluster", "--stop", PG_VERSION, PG_CLUSTER], "pg_dropcluster"))
    pkgs = [p for p in state.get("packages", []) if installed(p)]
    if pkgs:
        step("remove the page's packages", lambda: must(["dpkg", "-r", *pkgs], "dpkg -r"))
    def put_back(path):
        # A new file renamed into place, as dpkg does: a server that mapped the old one keeps it.
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy2(os.path.join(STATE, "files", path.lstrip("/")), path + ".jobq-put-back")
        os.replace(path + ".jobq-put-back", path)
    for path in state.get("files", []):
        step(f"put back {path}", lambda path=path: put_back(path))
    return problems


# ---- running the blocks -----------------------------------------------------------------------

def block_env(home):
    env = dict(os.environ, HOME=home, DEBIAN_FRONTEND="noninteractive")
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PGHOST", "PGPORT", "PGDATABASE", "PGUSER"):
        env.pop(k, None)
    return env


def venv_python(page_blocks, home):
    for b in page_blocks:
        if b.lang == "sh" and "norun" not in b.options:
            m = re.search(r"python3 -m venv (\S+)", b.text)
            if m:
                path = m.group(1)
                if path == "~" or path.startswith("~/"):
                    path = home + path[1:]           # the blocks' HOME
                return os.path.join(REPO, path, "bin", "python")   # relative: to the repository's root
    return None


def command_of(b, tmp, home, page_blocks):
    if b.lang == "sh":
        return ["bash", "-e", "-o", "pipefail", "-c", b.text]
    if b.lang == "python":
        py = venv_python(page_blocks, home)
        if py is None:
            raise Failure(f"{b.where()}: a python block, but the page makes no virtual environment (python3 -m venv)")
        script = os.path.join(tmp, f"block-{b.line}.py")
        with open(script, "w") as f:
            f.write(b.text)
        return [py, script]
    raise AssertionError(b.lang)


def run_sql(b):
    expect = b.options.get("error")
    r = run(["runuser", "-u", "postgres", "--", "psql", "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
             "-p", cluster_port(), "-d", DATABASE], input=b.text, cwd="/")
    if expect is None and r.returncode != 0:
        raise Failure(f"{b.where()}: the sql block failed (psql exited {r.returncode}):\n{r.stdout}")
    if expect is not None:
        got = re.search(r"ERROR:\s+([0-9A-Z]{5}):", r.stdout)
        if r.returncode == 0 or not got or got.group(1) != expect:
            raise Failure(f"{b.where()}: expected SQLSTATE {expect}, got {'success' if r.returncode == 0 else got and got.group(1)}:\n{r.stdout}")


def run_foreground(b, tmp, home, page_blocks):
    r = run(command_of(b, tmp, home, page_blocks), cwd=REPO, env=block_env(home), stdin=subprocess.DEVNULL, timeout=1200)
    if r.returncode != 0:
        raise Failure(f"{b.where()}: the {b.lang} block exited {r.returncode}:\n{b.text}--- its output:\n{r.stdout}")


BACKGROUND = []
STATE_NOW = {}


def kill_leftovers(state):
    """SIGKILL to the process groups a killed run left in the background: those whose leader
    still runs with the run's HOME."""
    home = os.path.join(state.get("tmp") or "/nonexistent", "home")
    for pgid in state.get("groups", []):
        try:
            with open(f"/proc/{pgid}/environ", "rb") as f:
                if f"HOME={home}".encode() in f.read().split(b"\0"):
                    os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def stop(proc):
    """SIGTERM to the block's process group; its exit status, or None if it would not stop."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_PATIENCE)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
    return proc.returncode


def run_background(b, tmp, home, page_blocks):
    queue, url = b.options.get("drains"), b.options.get("serves")
    if url:
        try:
            urllib.request.urlopen(url, timeout=2)
            raise Failure(f"{b.where()}: something answers {url} already, before the block runs "
                          "(the demo's dashboard? scripts/cluster.sh stop stops it)")
        except OSError:
            pass
    start = psql("SELECT now()", DATABASE) if queue else None
    out_path = os.path.join(tmp, f"block-{b.line}.log")
    out = open(out_path, "w")
    proc = subprocess.Popen(command_of(b, tmp, home, page_blocks), cwd=REPO, env=block_env(home), stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    BACKGROUND.append(proc)
    STATE_NOW["groups"].append(proc.pid)   # for a run killed before it stops them
    save(STATE_NOW)

    def output():
        out.flush()
        with open(out_path) as f:
            return f.read()

    def reached():
        if queue:
            q = queue.replace("'", "''")
            return psql(f"""SELECT NOT EXISTS (SELECT 1 FROM jobq.jobs WHERE queue = '{q}'
                                                AND (state = 'executing' OR (state = 'ready' AND run_at <= now())))
                               AND EXISTS (SELECT 1 FROM jobq.jobs WHERE queue = '{q}' AND state = 'completed'
                                           AND finished_at >= '{start}')""", DATABASE) == "t"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    what = f"queue {queue} drained by it" if queue else f"{url} served"
    deadline = time.monotonic() + PATIENCE
    while not reached():
        if proc.poll() is not None:
            raise Failure(f"{b.where()}: the {b.lang} block exited ({proc.returncode}) before {what}:\n{b.text}--- its output:\n{output()}")
        if time.monotonic() > deadline:
            stop(proc)
            raise Failure(f"{b.where()}: no {what} within {PATIENCE} s:\n{b.text}--- its output:\n{output()}")
        time.sleep(0.2)
    status = stop(proc)
    BACKGROUND.remove(proc)
    out.close()
    # Stopped by SIGTERM: exit 0 (a clean shutdown), or the signal's default action.
    if status is None or status not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
        raise Failure(f"{b.where()}: after SIGTERM the block {'did not exit' if status is None else f'exited {status}'}:\n"
                      f"--- its output:\n{output()}")
    return what, status


# ---- main -------------------------------------------------------------------------------------

PAGE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(REPO, "docs/getting-started.md")
PAGE_NAME = os.path.relpath(PAGE, REPO)


def main():
    if os.geteuid() != 0:
        print("getting-started: run as root (the page's commands are run as root)", file=sys.stderr)
        return 2
    with open(PAGE) as f:
        page_blocks = blocks(f.read())
    debs = page_debs(page_blocks)
    missing = [d for d in debs if not os.path.exists(d)]
    if missing:
        print(f"getting-started: {' '.join(missing)} missing (scripts/package.sh {PG_VERSION} builds it)", file=sys.stderr)
        return 1
    # A run that was killed left its record: put the machine back first.
    if os.path.exists(os.path.join(STATE, "state.json")):
        with open(os.path.join(STATE, "state.json")) as f:
            old = json.load(f)
        log("an earlier run did not finish: putting back what it changed")
        kill_leftovers(old)
        problems = restore(old)
        if old.get("tmp", "").startswith(tempfile.gettempdir() + "/jobq-getting-started-"):
            shutil.rmtree(old["tmp"], ignore_errors=True)
        if problems:
            print("getting-started: could not put back an earlier run's changes:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
    shutil.rmtree(STATE, ignore_errors=True)

    tmp = tempfile.mkdtemp(prefix="jobq-getting-started-")
    os.chmod(tmp, 0o755)
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    state, status, ran, shown = None, 1, 0, []

    def interrupted(signum, _frame):
        raise Failure(f"interrupted by signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    try:
        state = prepare(debs, tmp)
        for b in page_blocks:
            if "norun" in b.options:
                if b.lang in ("sh", "sql", "python"):
                    shown.append(b)
                continue
            t0 = time.monotonic()
            if b.lang == "sql":
                run_sql(b)
                what = "sql"
            elif "drains" in b.options or "serves" in b.options:
                cond, st = run_background(b, tmp, home, page_blocks)
                what = f"{b.lang}, in the background until {cond}, then SIGTERM (exit {st})"
            else:
                run_foreground(b, tmp, home, page_blocks)
                what = b.lang
            ran += 1
            log(f"ok: {b.where()} ({what}, {time.monotonic() - t0:.1f} s)")
        for b in shown:
            log(f"shown only: {b.where()} ({b.lang} norun)")
        log(f"{ran} blocks run, {len(shown)} shown only, 0 failed")
        status = 0
    except Failure as e:
        print(f"getting-started: FAILED: {e}", file=sys.stderr)
    except subprocess.TimeoutExpired as e:
        print(f"getting-started: FAILED: timed out: {e}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in BACKGROUND:
            stop(proc)
        problems = restore(state) if state is not None else []
        shutil.rmtree(tmp, ignore_errors=True)
        if problems:
            print("getting-started: could not put back (the record stays in " + STATE + "):\n  " + "\n  ".join(problems), file=sys.stderr)
            status = 1
        else:
            shutil.rmtree(STATE, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
