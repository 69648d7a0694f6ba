-- Checkout: the hot path.
--
-- Its common case (READ COMMITTED, a usable worker, no wait) runs in Rust without a plan:
-- jobq_checkout is a C function (src/checkout.rs), which hands every other case to
-- jobq._checkout, the SQL that serves them all, described here. Both claim the same jobs with
-- the same rows, locks and keys (tests/checkout.rs).
--
-- jobq._checkout: one statement per batch picks the first due, unpaused rows of jobq.ready in claim order
-- through its index (no sort), locks them with FOR UPDATE SKIP LOCKED (never waiting for
-- another checkout) and, in the same statement, takes what the keyed ones need to start
-- (jobq._take_keys: a concurrency or while_executing slot, a start of their rate, giving up
-- an until_executing key) and claims every one that can start: a claim deletes the ready row
-- and marks the job row executing. A job is claimed only by the transaction that deleted its
-- ready row, and only while its row says 'ready'. When that statement claimed fewer than
-- asked, the general path looks further, one keyed job at a time (jobq._claim_keyed): a job
-- that cannot start has its key (for a concurrency key: its key up to its limit) skipped for
-- the rest of the call, and the next batch looks past it.
-- PL/pgSQL prepares each statement once per backend and, with the function's
-- plan_cache_mode, keeps its generic plan: no statement is planned again per call.
--
-- The helpers a keyed claim and its release call for each job (jobq._take_keys, _take_slot,
-- _claim_keyed, _take_rate, _release_keys) do not pin their search_path as every other function
-- does: a pinned setting is parsed, applied and undone at every call, which cost a keyed job
-- about 50,000 instructions (bench/instructions.sh, row jobq_ckey). They run only inside
-- jobq's own functions, which pin it, and no role but the extension's owner may call them
-- (src/sql/privileges.sql); tests/lifecycle.rs checks both.

-- Takes a slot of (ns, key) numbered 1..slot_limit for `job` and returns its number, the
-- highest one free (jobs with a lower limit for the same key find the low slots free as
-- long as possible); NULL when every slot up to the limit is held. A slot is held by its
-- row (jobq.slots), so taking one is an INSERT. It never waits: a slot row another
-- transaction is inserting is passed over thanks to a transaction-level advisory lock on
-- the slot, which every taker tries before inserting (only takers insert slot rows), and a
-- row committed since this statement began makes the INSERT do nothing (under REPEATABLE
-- READ it raises 40001, which jobq._checkout_in_snapshot treats as "taken").
-- The advisory lock is the two-integer form with class 'jobq' (0x6a6f6271), apart from the
-- one-bigint form applications usually use; a collision with an application's lock of the
-- same class and hash only makes this checkout pass the slot over.
CREATE FUNCTION jobq._take_slot(ns "char", key text, slot_limit integer, job bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_slot integer;
BEGIN
    -- One statement: the highest slot that is free in this statement's snapshot and whose
    -- advisory lock no other taker holds (CASE: the lock is tried only on a free slot). A
    -- slot committed since the snapshot makes the INSERT do nothing: the job is then taken
    -- as blocked for this call, never started beyond its limit.
    INSERT INTO jobq.slots (ns, key, slot, job_id)
    SELECT _take_slot.ns, _take_slot.key, g.slot, job
      FROM generate_series(slot_limit, 1, -1) AS g(slot)
     WHERE CASE WHEN NOT EXISTS (SELECT 1 FROM jobq.slots s
                                  WHERE s.ns = _take_slot.ns AND s.key = _take_slot.key AND s.slot = g.slot)
                THEN pg_try_advisory_xact_lock(1785684593, hashtext(_take_slot.ns || g.slot || ':' || _take_slot.key))
                ELSE false END
     LIMIT 1
    ON CONFLICT DO NOTHING
    RETURNING slot INTO v_slot;
    RETURN v_slot;
END $$;

-- Takes what waiting job `job` needs to start at `started`, in this order: the slot of its
-- while_executing key, a slot of its concurrency key, a start of its rate (src/sql/rate_limits.sql;
-- last, because a start taken is not given back before the transaction ends); then gives up
-- its until_executing key and deletes its ready row (`ready`, which the caller holds locked).
-- Returns its concurrency slot (0: it has no concurrency key), and the caller must then mark
-- the job executing in the same transaction; or, when it cannot start now, having given back
-- what it took and changed nothing: -1 (its concurrency key is full), -2 (its while_executing
-- key is busy), -3 (its rate key has no start left).
-- The ready row is deleted here, by this statement's own snapshot, and not by the caller's
-- statement: when a replace updated the row after the caller's statement began, the caller's
-- lock (FOR UPDATE re-checks the newest version) holds a version that statement cannot see,
-- so a DELETE there would miss it, leaving keys taken for a job left waiting.
CREATE FUNCTION jobq._take_keys(job bigint, ready tid, started timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    j          record;
    v_slot     integer := 0;
    v_blocked  integer;
BEGIN
    SELECT x.unique_key, x.unique_strategy, x.concurrency_key, x.concurrency_limit, x.rate_key INTO j
      FROM jobq.live_jobs x WHERE x.id = job;
    -- (Nested IFs: unique_strategy is NULL for most jobs, and NULL AND x evaluates x.)
    IF j.unique_strategy = 'while_executing' THEN
        IF jobq._take_slot('u', j.unique_key, 1, job) IS NULL THEN
            RETURN -2;
        END IF;
    END IF;
    IF j.concurrency_key IS NOT NULL THEN
        v_slot := jobq._take_slot('c', j.concurrency_key, j.concurrency_limit, job);
        IF v_slot IS NULL THEN
            v_blocked := -1;
        END IF;
    END IF;
    IF v_blocked IS NULL AND j.rate_key IS NOT NULL AND NOT jobq._take_rate(j.rate_key, started) THEN
        v_blocked := -3;
    END IF;
    IF v_blocked IS NOT NULL THEN
        -- Give back the slots taken above.
        DELETE FROM jobq.slots s
         WHERE s.job_id = job AND ((s.ns = 'u' AND s.key = j.unique_key) OR (s.ns = 'c' AND s.key = j.concurrency_key));
        RETURN v_blocked;
    END IF;
    IF j.unique_strategy = 'until_executing' THEN
        DELETE FROM jobq.locks l WHERE l.key = j.unique_key AND l.job_id = job;
    END IF;
    DELETE FROM jobq.ready r WHERE r.ctid = ready;
    IF NOT FOUND THEN
        -- Cannot happen: the caller holds the row locked. Undo everything rather than leave
        -- keys taken for a job that does not start.
        RAISE EXCEPTION 'jobq: the ready row of job % was not found at its claim', job USING ERRCODE = 'XX000';
    END IF;
    RETURN v_slot;
END $$;

-- Claims a job whose ready row (`ready`, its ctid) this checkout holds locked, taking what it
-- needs to start first and deleting that row (jobq._take_keys). NULL when claimed; otherwise 'c' (its concurrency
-- key is full), 'u' (its while_executing key is busy) or 'r' (its rate key has no start
-- left in the window), and nothing changed.
CREATE FUNCTION jobq._claim_keyed(job bigint, ready tid, worker uuid, started timestamptz) RETURNS "char"
LANGUAGE plpgsql AS $$
DECLARE
    v_slot  integer := jobq._take_keys(job, ready, started);
BEGIN
    IF v_slot < 0 THEN
        RETURN (ARRAY['c', 'u', 'r']::"char"[])[-v_slot];
    END IF;
    UPDATE jobq.live_jobs x
       SET state = 'executing', worker_id = _claim_keyed.worker, attempt = x.attempt + 1,
           started_at = started, concurrency_slot = nullif(v_slot, 0)
     WHERE x.id = job;
    RETURN NULL;
END $$;

-- Checkout inside a REPEATABLE READ or SERIALIZABLE client transaction. There, locking a
-- row that another transaction changed after our snapshot raises 40001 instead of being
-- skipped; a job another checkout claimed meanwhile (or a slot it took) is exactly such a
-- row. So candidates are locked one at a time, each in its own subtransaction, and one
-- that changed under us is skipped like a locked one: the caller sees no serialization
-- failure that skipping would have avoided. The guarantees are the same rows and locks as
-- in READ COMMITTED; only the cost per candidate is higher.
CREATE FUNCTION jobq._checkout_in_snapshot(worker uuid, queues text[], max_jobs integer,
                                           now timestamptz, paused boolean,
                                           fp integer, fr timestamptz, fi bigint)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';
    v_skip_l   integer[] := '{}';
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
    v_blocked  "char";
    c          record;
    -- A limited role's checkout of every queue takes from those granted to it (src/sql/grants.sql).
    v_grants   text[] := CASE WHEN queues IS NULL AND EXISTS (SELECT 1 FROM jobq.queue_grants) THEN jobq._limits('worker') END;
BEGIN
    FOR c IN
        SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key, r.rate_key
          FROM jobq.ready r
         WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL AND r.run_at <= now
           AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
           AND (r.priority, r.run_at, r.id) >= (fp, fr, fi)  -- the claim floor (fp, fr, fi)
           AND (NOT paused OR NOT EXISTS (
                   SELECT 1 FROM jobq.pauses p
                    WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                       OR (p.queue IS NULL AND p.kind = r.kind)))
         ORDER BY r.priority, r.run_at, r.id
    LOOP
        EXIT WHEN cardinality(v_claimed) >= max_jobs;
        CONTINUE WHEN c.while_key = ANY (v_skip_u) OR c.rate_key = ANY (v_skip_r);
        CONTINUE WHEN c.concurrency_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
             WHERE s.key = c.concurrency_key AND c.concurrency_limit <= s.lim);
        BEGIN
            PERFORM 1 FROM jobq.ready r WHERE r.ctid = c.rid FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF NOT c.keyed THEN
                DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                UPDATE jobq.live_jobs x
                   SET state = 'executing', worker_id = _checkout_in_snapshot.worker,
                       attempt = x.attempt + 1, started_at = now
                 WHERE x.id = c.id;
                v_blocked := NULL;
            ELSE
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
            END IF;
            IF v_blocked IS NULL THEN
                v_claimed := v_claimed || c.id;
            ELSIF v_blocked = 'c' THEN
                v_skip_c := v_skip_c || c.concurrency_key;
                v_skip_l := v_skip_l || c.concurrency_limit;
            ELSIF v_blocked = 'u' THEN
                v_skip_u := v_skip_u || c.while_key;
            ELSE
                v_skip_r := v_skip_r || c.rate_key;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- changed since our snapshot: skip it, as if it were locked
        END;
    END LOOP;
    RETURN v_claimed;
END $$;

-- jobq_checkout: the common checkout is done in Rust, without a plan (src/checkout.rs); every
-- other case, and the rest of a call that met a ready row changed since its snapshot, by
-- jobq._checkout below, the SQL that serves them all. Both claim the same jobs with the same
-- rows and locks. The Rust calls the SQL through the function manager, outside the code that
-- catches errors, so that its errors (JQ001) reach the client unchanged.
CREATE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
                              wait interval DEFAULT NULL)
RETURNS SETOF jobq.job
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS 'MODULE_PATHNAME', 'jobq_checkout';

-- plan_cache_mode: PL/pgSQL keeps each statement's plan, but PostgreSQL re-plans a
-- parameterised statement on every call when it estimates the generic plan dearer than
-- custom ones, which it does for the candidate query; that cost ~170 us per checkout
-- (measured: docs/performance.md). The generic plan is the right one here: an ordered index scan.
-- jit = off: the generic plan's cost is estimated for a LIMIT it cannot know (10% of the
-- table), so on a large table it crosses jit_above_cost and every checkout compiled its
-- statements with LLVM: 1.7 s of JIT per call at 1.4M ready jobs (bench/soak.sh found it).
-- A checkout reads a handful of rows; JIT never pays here.
-- wait: see jobq._checkout_waiting below; a call without it pays one IS NOT NULL test.
CREATE FUNCTION jobq._checkout(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, jobq, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_queue    text;                 -- set when exactly one queue is asked for
    v_paused   boolean;
    v_rc       boolean;              -- READ COMMITTED: the fast path may run
    v_live     boolean;              -- the worker is registered, alive and the caller's
    v_fp       integer;              -- the claim floor: no ready row of these queues has a
    v_fr       timestamptz;          -- claim key (priority, run_at, id) below it
    v_fi       bigint;
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';       -- concurrency keys found full during this call,
    v_skip_l   integer[] := '{}';    -- for jobs with this limit or a lower one
    v_skip_u   text[] := '{}';       -- while_executing keys found busy during this call
    v_skip_r   text[] := '{}';       -- rate keys found without a start left during this call
    v_fast     integer := 0;         -- claimed (and returned) by the fast path
    v_want     integer;
    v_seen     integer;
    v_blocked  "char";
    c          record;
    cur        refcursor;
    v_grants   text[];               -- a limited role's worker patterns, for a call of every queue
    v_ok       boolean;
    v_fair     boolean;              -- the call may take from a fair queue
BEGIN
    -- A limited role (src/sql/grants.sql) checks out of the queues granted to it as a worker:
    -- those it names must be, and a call of every queue (NULL) walks past the others.
    -- (Where no grant exists, no role is limited: one look at an empty table.)
    IF EXISTS (SELECT 1 FROM jobq.queue_grants) THEN
        v_grants := jobq._limits('worker');
        IF v_grants IS NOT NULL AND queues IS NOT NULL THEN
            v_ok := jobq._require('worker', queues, 'queue');
            v_grants := NULL;
        END IF;
    END IF;
    IF wait IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobq._checkout_waiting(worker, queues, max_jobs, wait);
        RETURN;
    END IF;
    IF max_jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: max_jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF max_jobs < 1 OR max_jobs > 10000 THEN
        RAISE EXCEPTION 'jobq: max_jobs must be between 1 and 10000, got %', max_jobs USING ERRCODE = '22023';
    END IF;
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF cardinality(queues) = 1 THEN
        v_queue := queues[1];
    END IF;
    v_rc := current_setting('transaction_isolation') = 'read committed';
    -- The worker, judged by one lookup by primary key (src/liveness.rs), not by a part of the
    -- claim statement: that part cost every checkout ~39,000 instructions.
    v_live := jobq._usable_worker(worker);
    -- A call that may take from a fair queue is jobq._checkout_fair's (src/sql/fairness.sql);
    -- where no queue is fair, one look at an empty table.
    v_fair := CASE WHEN queues IS NULL THEN EXISTS (SELECT 1 FROM jobq.fairness_keys)
                   ELSE EXISTS (SELECT 1 FROM jobq.fairness_keys f WHERE f.queue = ANY (queues)) END;
    -- Where the walk starts: past the dead entries of earlier claims (src/floors.rs).
    SELECT f.priority, f.run_at, f.id INTO v_fp, v_fr, v_fi FROM jobq._floor('jobq.ready'::regclass, v_queue) f;

    -- Fast path, one statement: if the worker is alive and the caller's to act for, lock the
    -- first max_jobs unpaused candidates, take the keys of
    -- the keyed ones, claim every one that can start and return them. When that is fewer
    -- than max_jobs (a queue with fewer jobs, a key that cannot start, a dead worker), the
    -- general path below looks for the rest: it raises JQ001 for a dead worker and looks past
    -- the keys that cannot start. The candidates that could not start stay locked by us.
    -- No row lock on the worker (it would cost a WAL record per checkout): a reap pass that
    -- deletes this worker while we claim leaves our claims orphaned, and the next pass
    -- requeues them (jobq._reap, orphaned jobs).
    -- Plan shape: the claim goes through the primary key with id = ANY (ARRAY(...)); a join
    -- with `cand` gets a hash join over the whole table in the generic plan (which guesses
    -- LIMIT max_jobs at 10% of the table). The two statements differ only in the queue
    -- condition, so that each gets the index that serves its order.
    IF v_rc AND v_live AND NOT v_fair THEN
        IF v_queue IS NOT NULL THEN
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        ELSE
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                   AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        END IF;
        GET DIAGNOSTICS v_fast = ROW_COUNT;
        IF v_fast >= max_jobs THEN
            RETURN;
        END IF;
    END IF;

    -- The general path. jobq._live_worker without its row lock (see the fast path); a worker
    -- that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) claims nothing.
    IF NOT v_live THEN
        IF EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner)
                      AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)) THEN
            RETURN;
        END IF;
        PERFORM jobq._refuse_worker(worker);
    END IF;
    v_paused := EXISTS (SELECT 1 FROM jobq.pauses);
    IF v_fair THEN
        v_claimed := jobq._checkout_fair(worker, queues, max_jobs, v_now, v_grants);
    ELSIF NOT v_rc THEN
        v_claimed := jobq._checkout_in_snapshot(worker, queues, max_jobs, v_now, v_paused, v_fp, v_fr, v_fi);
    ELSE
        LOOP
            v_want := max_jobs - v_fast - cardinality(v_claimed);
            v_seen := 0;
            -- The two statements differ only in the queue condition, so that each gets the index
            -- that serves its order: one queue, or any/several queues.
            IF v_queue IS NOT NULL THEN
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            ELSE
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL
                   AND r.run_at <= v_now
                       AND (v_grants IS NULL OR jobq._sees(r.queue, v_grants))  -- a limited role's queues
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            END IF;

            v_blocked := NULL;
            LOOP
                FETCH cur INTO c;
                EXIT WHEN NOT FOUND;
                v_seen := v_seen + 1;
                IF c.claimed THEN
                    v_claimed := v_claimed || c.id;
                    CONTINUE;
                END IF;
                CONTINUE WHEN NOT c.keyed;  -- its job was not 'ready' (cannot happen): the ready row is gone
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, v_now);
                IF v_blocked IS NULL THEN
                    v_claimed := v_claimed || c.id;
                ELSIF v_blocked = 'c' THEN
                    -- No free slot up to this job's limit: jobs of this key with a limit no
                    -- higher are blocked too; a job with a higher limit may still find one.
                    v_skip_c := v_skip_c || c.concurrency_key;
                    v_skip_l := v_skip_l || c.concurrency_limit;
                ELSIF v_blocked = 'u' THEN
                    v_skip_u := v_skip_u || c.while_key;
                ELSE
                    v_skip_r := v_skip_r || c.rate_key;
                END IF;
            END LOOP;
            CLOSE cur;
            -- Stop when enough were claimed, or when the batch came back short (nothing more is
            -- available); otherwise look again past the keys that could not start.
            EXIT WHEN v_fast + cardinality(v_claimed) >= max_jobs OR v_seen < v_want;
        END LOOP;
    END IF;

    -- The claimed jobs, in the order they were claimed.
    PERFORM jobq._tally(j.queue, 'started', j.run_at, j.started_at)  -- src/counters.rs
       FROM jobq.live_jobs j WHERE j.id = ANY (v_claimed);
    RETURN QUERY
    SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
           j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
           j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints, j.fairness_key
      FROM unnest(v_claimed) WITH ORDINALITY AS k(id, ord)
      JOIN jobq.live_jobs j ON j.id = k.id
     ORDER BY k.ord;
END $$;

-- jobq_checkout(..., wait): checks out; when nothing is available, waits inside the server
-- (src/waits.rs) until a commit makes a job of these queues available (or frees a slot of a
-- key that holds one back), the earliest scheduled one comes due, the earliest rate window
-- that holds one back opens, or `wait` runs out, and checks out again. The waiter is
-- registered before its first look, so no commit between a look and the sleep goes unnoticed. Each look runs in a
-- subtransaction that is rolled back when it claimed nothing: whatever it locked (a keyed job
-- whose slot was taken meanwhile) is not held while the call sleeps. READ COMMITTED only: a
-- transaction snapshot would never see the jobs it waits for.
CREATE FUNCTION jobq._checkout_waiting(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_until  timestamptz;
    v_look   timestamptz;
    v_due    timestamptz;
    v_keys   text[];
    v_rates  text[];
    v_rate   text;
    v_opens  timestamptz;
    v_opening integer;
    v_hashes integer[] := ARRAY(SELECT hashtext(q) FROM unnest(queues) q);  -- ready_by_queue's keys
BEGIN
    IF wait <= interval '0' OR wait > interval '1 hour' THEN
        RAISE EXCEPTION 'jobq: wait must be more than 0 and at most 1 hour, got %', wait USING ERRCODE = '22023';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: jobq_checkout with wait needs READ COMMITTED'
            USING ERRCODE = '0A000',
                  DETAIL = 'A transaction snapshot never sees the jobs committed after it was taken.';
    END IF;
    v_until := clock_timestamp() + wait;
    IF NOT jobq._wait_begin(worker, queues) THEN
        -- No waiter slot (no preload, or all taken): no reap pass keeps this worker alive
        -- while it waits, so the wait ends before its heartbeat could run out.
        v_until := least(v_until, clock_timestamp() + current_setting('jobq.heartbeat_timeout')::interval / 2);
    END IF;
    LOOP
        -- A worker that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) waits no
        -- more: read before each look, so a call rung for it, or begun after it, returns at
        -- once (its looks would claim nothing).
        EXIT WHEN EXISTS (SELECT 1 FROM jobq.workers w
                           WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner));
        BEGIN
            v_look := clock_timestamp();
            RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
            IF FOUND THEN
                PERFORM jobq._wait_end(false);  -- no longer a waiter, whatever the transaction does next
                RETURN;
            END IF;
            -- What no commit for these queues announces, read anew at each look (a scan of
            -- these queues' waiting rows: none of them could start): the earliest scheduled job
            -- comes due (the waiter's alarm; a commit that schedules an earlier one moves it);
            -- a slot is freed, by a job of any queue, of a key that holds back a due job
            -- (`_freed`'s names: 'c' and a concurrency key, 'u' and a while_executing key); a
            -- rate window that holds one back opens.
            SELECT min(r.run_at) FILTER (WHERE r.run_at > v_look),
                   array_agg(DISTINCT 'c' || r.concurrency_key) FILTER (WHERE r.run_at <= v_look AND r.concurrency_key IS NOT NULL)
                   || array_agg(DISTINCT 'u' || r.while_key) FILTER (WHERE r.run_at <= v_look AND r.while_key IS NOT NULL),
                   array_agg(DISTINCT r.rate_key) FILTER (WHERE r.run_at <= v_look AND r.rate_key IS NOT NULL)
              INTO v_due, v_keys, v_rates
              FROM (SELECT x.run_at, x.concurrency_key, x.while_key, x.rate_key FROM jobq.ready x
                     WHERE x.fairness_key IS NULL  -- ready_by_queue
                       AND (queues IS NULL OR (x.queue_hash = ANY (v_hashes) AND x.queue = ANY (queues)))
                    UNION ALL
                    SELECT x.run_at, x.concurrency_key, x.while_key, x.rate_key FROM jobq.ready x
                     WHERE x.fairness_key IS NOT NULL  -- ready_fair (src/sql/fairness.sql)
                       AND (queues IS NULL OR (x.queue_hash = ANY (v_hashes) AND x.queue = ANY (queues)))) r;
            -- The earliest of their full windows (its oldest start, through rate_slots_oldest,
            -- still in it) opens when that start leaves it, strictly after last_start + per
            -- (jobq._take_rate), with every start made at the same moment.
            SELECT l.key, o.oldest + l.per + interval '1 ms',
                   (SELECT count(*) FROM jobq.rate_slots s
                     WHERE s.key = l.key AND s.last_start = o.oldest AND s.slot <= l.max_starts)
              INTO v_rate, v_opens, v_opening
              FROM jobq.rate_limits l
             CROSS JOIN LATERAL (SELECT s.last_start AS oldest FROM jobq.rate_slots s
                                  WHERE s.key = l.key AND s.slot <= l.max_starts
                                  ORDER BY s.last_start LIMIT 1) o
             WHERE l.key = ANY (v_rates) AND o.oldest >= v_look - l.per
             ORDER BY 2
             LIMIT 1;
            -- Nothing claimed: let go of whatever the look locked, and of the locks on the
            -- tables it read (held, they would block DDL on them for the whole wait).
            RAISE SQLSTATE 'JQ000';
        EXCEPTION WHEN SQLSTATE 'JQ000' THEN
            NULL;
        END;
        EXIT WHEN clock_timestamp() >= v_until;
        PERFORM jobq._wait(v_until, v_due, v_keys, v_rate, v_opens, coalesce(v_opening, 1));
    END LOOP;
    PERFORM jobq._wait_end(true);  -- ran out: what its last look could not use goes on
END $$;
