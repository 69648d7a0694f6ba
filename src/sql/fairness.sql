-- Fair checkout (SPEC, "Tenants"): among the due jobs of one priority in a queue, checkout
-- serves the fairness keys in turns, so that no key's backlog delays another key's job by
-- more than one turn of the active keys.
--
-- How: the key that was served least recently goes first. Each (queue, key, priority) that has
-- jobs has a row in jobq.fairness whose `served` says when the key last went to the back of
-- that priority's line (a key's turns at one priority are not moved by its jobs of another);
-- jobs without a key form one key of their own (the rows whose fairness_key is NULL). A claim
-- takes the key with the lowest `served` that has a due job at the queue's top due priority,
-- takes that key's oldest due job (by run_at, then id), and, once the key has had `weight`
-- jobs, moves it to the back (`served` from a sequence) unless it is there already (its
-- `served` the sequence's last: a key served alone is not written). A key is thus served again only after
-- every key that was ahead of it, whatever the order and volume of the enqueues and whatever
-- run_at says (a key's turn is not fixed when its jobs are enqueued, so a burst of scheduled
-- jobs coming due does not jump the line).
--
-- A queue with rows here is *fair*: jobq._checkout hands each call that may take from one to
-- jobq._checkout_fair (src/sql/checkout.sql), and the Rust fast path hands every call to the SQL
-- while any row exists (src/fairness.rs). A job with a key has its ready row in ready_fair only
-- (src/sql/schema.sql), so the plain checkout never meets it; the jobs without a key of a fair
-- queue stay in ready_by_queue.
--
-- The checkout's helpers here (jobq._checkout_fair, _fair_claim, _fair_next, _fair_top,
-- _fair_skip_entry, _fair_due, _paused) run only inside jobq._checkout, whose search_path,
-- plan_cache_mode and jit they keep: a setting of their own would be parsed, applied and undone
-- at every call, on every claim (as the keyed claim's helpers in src/sql/checkout.sql;
-- tests/lifecycle.rs checks that no role may call them).
--
-- Concurrent checkouts: a claim locks its key's row (FOR UPDATE SKIP LOCKED), so two checkouts
-- at once serve two keys, not one key twice; when every key with a due job is locked by
-- another checkout, a checkout takes from a locked key anyway without moving it (it would
-- otherwise return nothing while jobs wait), so a key gets at most one job more per
-- concurrent checkout in a turn. A key's row stays locked until the claiming transaction
-- ends: a worker that checks out inside a long transaction holds its key's turn until then.

-- When each key was last moved to the back of the line.
CREATE SEQUENCE jobq.fairness_turns AS bigint;
-- The transaction id of the last pass that pruned turns (jobq._prune_fairness), set before it
-- deletes a row, while it holds the prune's lock (one pass prunes at a time, to its commit): a
-- sequence, read outside any snapshot. An enqueue under REPEATABLE READ or SERIALIZABLE whose
-- snapshot sees that transaction over (jobq._fair_keys) sees every deletion of turns made so
-- far. Not dumped: a value from another cluster is at worst taken for a pass not yet seen.
CREATE SEQUENCE jobq.fairness_pruned AS bigint;

-- One row per (queue, fairness key, priority) that has waiting jobs, and one with priority NULL
-- per key given a weight (kept while the key has no job); fairness_key NULL: the queue's jobs
-- without a key, whose row at a priority comes with the first keyed job there (a priority
-- where only jobs without a key wait has no row, and no turns to take). Written by
-- jobq._fair_keys (a keyed job becomes ready), jobq_set_fairness_weight and the claims; pruned
-- by the pass (jobq._prune_fairness). Each row has a copy in jobq.fairness_keys (below), where
-- it is looked up by key.
-- No unique index: an enqueue that inserted a key's row would make every other enqueue of that
-- key wait for its commit (and two enqueues that insert two new keys in opposite orders would
-- deadlock), and one that met a row a running checkout had moved would wait for that checkout.
-- Two enqueues that add the same new key at once may each insert its row: the key then has two
-- turns in each round until the next pass keeps the one served least recently.
CREATE TABLE jobq.fairness (
    queue         text NOT NULL,
    fairness_key  text,
    priority      integer,                      -- the turns of this priority; NULL: the weight only
    weight        integer NOT NULL DEFAULT 1,   -- jobs per turn (jobq_set_fairness_weight)
    served        bigint NOT NULL DEFAULT nextval('jobq.fairness_turns'),
    taken         integer NOT NULL DEFAULT 0,   -- jobs taken since `served` last moved
    queue_hash    integer NOT NULL GENERATED ALWAYS AS (pg_catalog.hashtext(queue)) STORED  -- fairness_by_turn
)
-- Every claim moves its key's row (a new version, and a new entry of fairness_by_turn): vacuumed
-- after a fixed number of them, as jobq.ready is (src/sql/schema.sql), so the walk of a queue's
-- keys does not pass the dead entries of every claim since the last visit.
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);
-- The claim's walk: a queue's keys at one priority, least recently served first. It leads with
-- the queue name's hash, as jobq.ready's indexes do: each entry a walk passes is then compared
-- as integers and read at fixed offsets, where a leading name was compared through its
-- collation and put every later column at an offset computed entry by entry (a fair job's
-- instructions, docs/performance.md). Names may share a hash: a walk checks each row's queue.
CREATE INDEX fairness_by_turn ON jobq.fairness (queue_hash, priority, served);
-- Statements here keep a generic plan, which estimates `queue = $1` as 1 / (the distinct queues
-- ANALYZE saw): with one fair queue, every row, and a look for a queue with no turns read the
-- whole table. A fixed estimate of many queues keeps them on the indexes (as jobq.ready's).
ALTER TABLE jobq.fairness ALTER COLUMN queue SET (n_distinct = 1000), ALTER COLUMN queue_hash SET (n_distinct = 1000);
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness', '');

-- The identity (queue, fairness key, priority) and weight of each row of jobq.fairness, as many
-- copies as it has rows: where a key's rows are looked up by key (jobq._fair_keys,
-- jobq_set_fairness_weight, the fast paths' looks, the queues that take turns). Kept apart
-- because every claim moves its key's row of jobq.fairness: a new version whose `served` is
-- indexed, so an entry in each index of that table; an index by key there cost each claim a
-- second entry (bench/instructions.sh, row jobq_fair). Inserted with the rows
-- (jobq._fair_keys), given the same weight (jobq_set_fairness_weight), deleted with them
-- (jobq._prune_fairness), never moved. No unique index, for jobq.fairness's reasons.
CREATE TABLE jobq.fairness_keys (
    queue         text NOT NULL,
    fairness_key  text,
    priority      integer,
    weight        integer NOT NULL DEFAULT 1
);
CREATE INDEX fairness_by_key ON jobq.fairness_keys (queue, fairness_key, priority);
ALTER TABLE jobq.fairness_keys ALTER COLUMN queue SET (n_distinct = 1000);
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness_keys', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.fairness_turns', '');

-- Whatever inserts turns notes its database in shared memory before it commits, so that the
-- fast path of checkout in a database that never had one skips the table, and the lowest
-- `served` of the rows that take turns, which the walks' floors must not pass (src/fairness.rs).
-- ALWAYS: also in a subscription's initial copy (and in any session whose
-- session_replication_role is replica).
CREATE FUNCTION jobq._fairness_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_fairness((SELECT min(a.served) FROM added a WHERE a.priority IS NOT NULL));
    RETURN NULL;
END $$;
CREATE TRIGGER fairness_written AFTER INSERT ON jobq.fairness REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._fairness_written();
ALTER TABLE jobq.fairness ENABLE ALWAYS TRIGGER fairness_written;
-- A subscription's apply fires row triggers only, never statement triggers: this one notes the
-- rows that arrive that way, one by one. REPLICA: only there (and in replica sessions), where a
-- second note of a row is harmless.
CREATE FUNCTION jobq._fairness_replicated() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_fairness(CASE WHEN NEW.priority IS NOT NULL THEN NEW.served END);
    RETURN NULL;
END $$;
CREATE TRIGGER fairness_replicated AFTER INSERT ON jobq.fairness
    FOR EACH ROW EXECUTE FUNCTION jobq._fairness_replicated();
ALTER TABLE jobq.fairness ENABLE REPLICA TRIGGER fairness_replicated;

-- Makes `keys` of `queue` take turns at `priority` (with the queue's key of jobs without one
-- there): their rows, inserted when missing, new keys at the back, each with its key's weight.
-- With `priority` NULL, the rows that keep `keys`' weights (jobq_set_fairness_weight). Called
-- where a job with a fairness key becomes ready (jobq._enter_ready), with a shared advisory lock
-- on the queue held to the end of the transaction: the pass prunes a queue only under that lock
-- taken exclusively, and holds it until it commits (jobq._prune_fairness), so a row this looks
-- at is never being removed under a job about to need it, and a row it inserts is never pruned
-- before its job commits. The lock is the two-integer form with class 'jobq', as
-- jobq._take_slot's.
-- Under READ COMMITTED the look for a missing row is taken after the lock. A transaction
-- snapshot (REPEATABLE READ, SERIALIZABLE) may predate a pass that removed the row since: its
-- look is trusted when it sees the last pruning pass over (jobq.fairness_pruned), as it nearly
-- always does (a pass a second); otherwise the rows are inserted whatever it sees (the pass
-- keeps one).
-- The INSERT runs only when a row is missing: its statement trigger (fairness_written) fires
-- even for no row, and cost each enqueue of a known key more than its look (5,000 enqueues of
-- 1,000 known keys in one transaction: 105 us a call with it, 37 without).
CREATE FUNCTION jobq._fair_keys(queue text, priority integer, keys text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_rc      boolean := current_setting('transaction_isolation') = 'read committed';
    v_missing text[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1785684593, hashtext('fairness:' || queue));
    IF NOT v_rc THEN
        -- (Read after the lock: a pass that prunes this queue from now on waits for this
        -- transaction; one that pruned it since the snapshot set its id before.)
        v_rc := pg_visible_in_snapshot(coalesce(pg_sequence_last_value('jobq.fairness_pruned'), 1)::text::xid8,
                                       pg_current_snapshot());
    END IF;
    -- A key's rows are looked up by `fairness_key = k` or `IS NULL`, each a condition of
    -- fairness_by_key (`IS NOT DISTINCT FROM` is none: it read every row of the queue).
    -- Each look a subquery with LIMIT, not EXISTS: the planner made that a hashed subplan that
    -- read every row of the queue at each call (5 ms with 16,000 keys).
    v_missing := ARRAY(
        SELECT k FROM unnest(keys || CASE WHEN _fair_keys.priority IS NOT NULL THEN ARRAY[NULL::text] END) k
         WHERE NOT v_rc
            OR CASE WHEN k IS NULL
                    THEN (SELECT true FROM jobq.fairness_keys f
                           WHERE f.queue = _fair_keys.queue AND f.fairness_key IS NULL
                             AND f.priority IS NOT DISTINCT FROM _fair_keys.priority LIMIT 1)
                    ELSE (SELECT true FROM jobq.fairness_keys f
                           WHERE f.queue = _fair_keys.queue AND f.fairness_key = k
                             AND f.priority IS NOT DISTINCT FROM _fair_keys.priority LIMIT 1) END IS NULL);
    IF cardinality(v_missing) = 0 THEN
        RETURN;
    END IF;
    WITH added AS (
        INSERT INTO jobq.fairness_keys (queue, fairness_key, priority, weight)
        SELECT _fair_keys.queue, k, _fair_keys.priority,
               coalesce(CASE WHEN k IS NULL
                             THEN (SELECT max(g.weight) FROM jobq.fairness_keys g
                                    WHERE g.queue = _fair_keys.queue AND g.fairness_key IS NULL)
                             ELSE (SELECT max(g.weight) FROM jobq.fairness_keys g
                                    WHERE g.queue = _fair_keys.queue AND g.fairness_key = k) END, 1)
          FROM unnest(v_missing) k
        RETURNING fairness_keys.queue, fairness_keys.fairness_key, fairness_keys.priority, fairness_keys.weight)
    INSERT INTO jobq.fairness (queue, fairness_key, priority, weight)
    SELECT a.queue, a.fairness_key, a.priority, a.weight FROM added a;
END $$;

-- jobq_set_fairness_weight(queue, fairness_key, weight): the key (NULL: the queue's jobs
-- without a key) gets up to `weight` jobs in each turn, 1 to 100.
CREATE FUNCTION jobq_set_fairness_weight(queue text, fairness_key text, weight integer) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL OR weight IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and weight must not be NULL' USING ERRCODE = '22004';
    ELSIF queue = '' OR octet_length(queue) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue must be 1 to 1000 bytes' USING ERRCODE = '22023';
    ELSIF fairness_key = '' OR octet_length(fairness_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: fairness_key must be 1 to 1000 bytes (NULL: the jobs without a key)'
            USING ERRCODE = '22023';
    ELSIF weight < 1 OR weight > 100 THEN
        RAISE EXCEPTION 'jobq: weight must be between 1 and 100, got %', weight USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._fair_keys(queue, NULL, ARRAY[fairness_key]);  -- the row that keeps the weight
    -- The key's copies by fairness_by_key: `= fairness_key` or `IS NULL`, each a condition of
    -- the index (`IS NOT DISTINCT FROM` is none: it read every row of the queue).
    UPDATE jobq.fairness_keys f SET weight = jobq_set_fairness_weight.weight
     WHERE f.queue = jobq_set_fairness_weight.queue
       AND (f.fairness_key = jobq_set_fairness_weight.fairness_key
            OR f.fairness_key IS NULL AND jobq_set_fairness_weight.fairness_key IS NULL);
    -- Its rows of turns, among the queue's (fairness_by_turn has no key: a call that changes a
    -- weight reads every row of the queue, so that no claim writes an entry by key).
    UPDATE jobq.fairness f SET weight = jobq_set_fairness_weight.weight, taken = 0
     WHERE f.queue_hash = hashtext(jobq_set_fairness_weight.queue) AND f.queue = jobq_set_fairness_weight.queue
       AND (f.fairness_key = jobq_set_fairness_weight.fairness_key
            OR f.fairness_key IS NULL AND jobq_set_fairness_weight.fairness_key IS NULL);
END $$;

-- One claim of fair queue `queue` for jobq._checkout_fair: the oldest due job of the key
-- whose turn it is, at the queue's top due priority that has a key able to start one, claimed
-- for `worker` (its ready row deleted, its job row executing, what it needs to start taken:
-- jobq._claim_keyed). Returns the job's id; NULL when no key has a job this call can take. A
-- job that cannot start (its concurrency key full, its while_executing key busy, its rate
-- spent) is passed, with every job of the claim behind it held back by the same key, as a
-- plain checkout passes them (SPEC: the jobs behind it still start): the key's turn goes to
-- its oldest job that can start. A key none of whose due jobs can start yields its turn at that
-- priority: it is added to `skip` (jobq._fair_skip_entry) and the next key is tried; at a later
-- priority it takes its turn again.
-- With `locked` false (REPEATABLE READ, SERIALIZABLE: a key row changed since the snapshot
-- cannot be locked there) the key is picked without its row lock and moved only when its row
-- can be updated.
CREATE FUNCTION jobq._fair_claim(worker uuid, queue text, now timestamptz, paused boolean,
                                 locked boolean, INOUT skip text[], OUT job bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_hash     integer := hashtext(queue);
    v_from     integer := -2147483648;   -- the lowest priority still to look at
    v_p        integer;
    k          record;
    c          record;
    v_blocked  "char";
    v_rows     tid[];                    -- the key's rows to move to the back
    v_last     bigint;                   -- the last turn jobq.fairness_turns gave
    v_skip_c   text[] := '{}';           -- as jobq._checkout's: the keys of jobs that could
    v_skip_l   integer[] := '{}';        -- not start in this claim
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
BEGIN
    LOOP
        v_p := jobq._fair_top(v_hash, queue, v_from, now);
        IF v_p IS NULL THEN
            RETURN;
        END IF;
        LOOP
            -- The key whose turn it is: least recently served, with a due, unpaused job at v_p,
            -- not yielded in this call; its row locked, or any when every one is locked.
            -- A row whose xmax is a transaction running at this statement's snapshot is held
            -- (locked or moved) by another checkout: SKIP LOCKED would pass it, and it is
            -- passed before the look for its key's due job, as the Rust passes it by its header
            -- (src/fairness.rs); a key held so is still served by the look below when no other
            -- key can be. (An xmax that is a multixact's id is compared as it is: at worst its
            -- key is left to that look.) The look for a due job is jobq._fair_due's, written
            -- out: a PL/pgSQL call per key passed (about 6 a claim at 16 clients) cost the fair
            -- rate some 7 % (two pairs of 20 s runs, 1,053 against 1,136 and 1,231 against 1,312
            -- jobs/s), and a SQL function with a subquery is never inlined.
            k := NULL;
            IF locked THEN
                SELECT f.ctid AS fid, f.fairness_key INTO k FROM jobq.fairness f
                 WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                   AND jobq._fair_skip_entry(v_p, _fair_claim.queue, f.fairness_key) <> ALL (skip)
                   AND f.xmax <> ALL (ARRAY(SELECT pg_catalog.xid(x) FROM pg_catalog.pg_snapshot_xip(pg_catalog.pg_current_snapshot()) x))
                   AND CASE WHEN f.fairness_key IS NULL
                            THEN EXISTS (SELECT 1 FROM jobq.ready r
                                          WHERE r.queue_hash = v_hash AND r.queue = _fair_claim.queue AND r.fairness_key IS NULL
                                            AND r.priority = v_p AND r.run_at <= now
                                            AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)))
                            ELSE EXISTS (SELECT 1 FROM jobq.ready r
                                          WHERE r.queue_hash = v_hash AND r.priority = v_p
                                            AND r.fairness_key = f.fairness_key AND r.queue = _fair_claim.queue
                                            AND r.run_at <= now
                                            AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))) END
                 ORDER BY f.served
                 LIMIT 1
                   FOR UPDATE OF f SKIP LOCKED;
            END IF;
            IF k IS NULL THEN
                SELECT NULL::tid AS fid, f.fairness_key INTO k FROM jobq.fairness f
                 WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                   AND jobq._fair_skip_entry(v_p, _fair_claim.queue, f.fairness_key) <> ALL (skip)
                   AND jobq._fair_due(v_hash, _fair_claim.queue, f.fairness_key, v_p, now, paused)
                 ORDER BY f.served
                 LIMIT 1;
                IF NOT FOUND THEN
                    -- No key's turn at v_p. Where no key has a job there, the jobs without one
                    -- are all there is, and take no turns: they are served, unless they yielded.
                    EXIT WHEN EXISTS (SELECT 1 FROM jobq.fairness f
                                       WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p)
                           OR jobq._fair_skip_entry(v_p, _fair_claim.queue, NULL) = ANY (skip);
                    SELECT NULL::tid AS fid, NULL::text AS fairness_key INTO k;
                END IF;
            END IF;
            -- Its oldest due job that no other checkout holds and that can start.
            LOOP
                IF k.fairness_key IS NULL THEN
                    SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key,
                           r.rate_key INTO c FROM jobq.ready r
                     WHERE r.queue_hash = v_hash AND r.queue = _fair_claim.queue AND r.fairness_key IS NULL
                       AND r.priority = v_p AND r.run_at <= now
                       AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT 1
                       FOR UPDATE OF r SKIP LOCKED;
                ELSE
                    SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key,
                           r.rate_key INTO c FROM jobq.ready r
                     WHERE r.queue_hash = v_hash AND r.priority = v_p AND r.fairness_key = k.fairness_key
                       AND r.queue = _fair_claim.queue AND r.run_at <= now
                       AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.fairness_key, r.run_at, r.id
                     LIMIT 1
                       FOR UPDATE OF r SKIP LOCKED;
                END IF;
                EXIT WHEN NOT FOUND;
                IF c.keyed THEN
                    v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
                ELSE
                    DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _fair_claim.worker, attempt = j.attempt + 1,
                           started_at = now
                     WHERE j.id = c.id AND j.state = 'ready';
                    v_blocked := NULL;
                END IF;
                EXIT WHEN v_blocked IS NULL;
                IF v_blocked = 'c' THEN
                    v_skip_c := v_skip_c || c.concurrency_key;
                    v_skip_l := v_skip_l || c.concurrency_limit;
                ELSIF v_blocked = 'u' THEN
                    v_skip_u := v_skip_u || c.while_key;
                ELSE
                    v_skip_r := v_skip_r || c.rate_key;
                END IF;
            END LOOP;
            IF FOUND AND v_blocked IS NULL THEN  -- (FOUND: the claim's last statement found its row)
                -- Served: to the back once it had its weight's jobs in this turn. Its row is
                -- the one locked above; a key picked without its lock (REPEATABLE READ,
                -- SERIALIZABLE) has its rows locked now, never waiting for another checkout's
                -- hold. A key taken from while another checkout holds it stays where it is.
                v_rows := CASE WHEN k.fid IS NOT NULL THEN ARRAY[k.fid] ELSE '{}' END;
                IF k.fid IS NULL AND NOT locked THEN
                    BEGIN
                        v_rows := ARRAY(SELECT f.ctid FROM jobq.fairness f
                                         WHERE f.queue_hash = v_hash AND f.queue = _fair_claim.queue AND f.priority = v_p
                                           AND (f.fairness_key = k.fairness_key
                                                OR f.fairness_key IS NULL AND k.fairness_key IS NULL)
                                           FOR UPDATE NOWAIT);
                    EXCEPTION WHEN serialization_failure OR lock_not_available THEN
                        NULL;  -- held, or moved by a transaction after our snapshot: it stays where that one put it
                    END;
                END IF;
                v_last := pg_sequence_last_value('jobq.fairness_turns');
                -- A key already at the back stays there: its `served` is the last the
                -- sequence gave, so no row is behind it, and a row added later comes behind it
                -- either way. A key served alone is then not written at all (weight 1).
                UPDATE jobq.fairness f
                   SET taken = CASE WHEN f.taken + 1 >= f.weight THEN 0 ELSE f.taken + 1 END,
                       served = CASE WHEN f.taken + 1 >= f.weight AND f.served IS DISTINCT FROM v_last
                                     THEN nextval('jobq.fairness_turns') ELSE f.served END
                 WHERE f.ctid = ANY (v_rows)
                   AND (f.taken + 1 < f.weight OR f.taken <> 0 OR f.served IS DISTINCT FROM v_last);
                job := c.id;
                RETURN;
            END IF;
            -- Its jobs are all held by other checkouts, or none can start: the key yields its
            -- turn at this priority for the rest of this call.
            skip := skip || jobq._fair_skip_entry(v_p, _fair_claim.queue, k.fairness_key);
        END LOOP;
        EXIT WHEN v_p = 2147483647;
        v_from := v_p + 1;
    END LOOP;
END $$;

-- The entry of `skip` (jobq._fair_claim, jobq._fair_next) for key `fairness_key` (NULL: the jobs
-- without one) of queue `queue` yielding its turn at priority `priority`. One expression, which
-- PostgreSQL inlines where it is used: the walks of the keys test it on every key they pass.
CREATE FUNCTION jobq._fair_skip_entry(priority integer, queue text, fairness_key text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT priority::text || E'\n' || queue || E'\n' || coalesce(fairness_key, '')
$$;

-- The top due priority of queue `queue` (`hash`: its hashtext) from `lowest` on, NULL when none
-- is due: of its jobs without a key (ready_by_queue) and of those with one (ready_fair), each
-- the first due row. Where jobq._fair_claim and jobq._fair_next look first.
CREATE FUNCTION jobq._fair_top(hash integer, queue text, lowest integer, now timestamptz) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT min(x.priority)
              FROM ((SELECT r.priority FROM jobq.ready r
                      WHERE r.queue_hash = hash AND r.queue = _fair_top.queue AND r.fairness_key IS NULL
                        AND r.priority >= lowest AND r.run_at <= now
                      ORDER BY r.priority, r.run_at, r.id LIMIT 1)
                    UNION ALL
                    (SELECT r.priority FROM jobq.ready r
                      WHERE r.queue_hash = hash AND r.queue = _fair_top.queue AND r.fairness_key IS NOT NULL
                        AND r.priority >= lowest AND r.run_at <= now
                      ORDER BY r.priority, r.fairness_key, r.run_at, r.id LIMIT 1)) x);
END $$;

-- Whether key `fairness_key` (NULL: the jobs without a key) of queue `queue` (`hash`: its
-- hashtext) has a due job at priority `priority` that no pause holds back. Written out in
-- jobq._fair_claim's walk of locked rows (for speed, said there): a change here goes there too.
CREATE FUNCTION jobq._fair_due(hash integer, queue text, fairness_key text, priority integer,
                               now timestamptz, paused boolean) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF fairness_key IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM jobq.ready r
                        WHERE r.queue_hash = hash AND r.queue = _fair_due.queue AND r.fairness_key IS NULL
                          AND r.priority = _fair_due.priority AND r.run_at <= now
                          AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)));
    END IF;
    RETURN EXISTS (SELECT 1 FROM jobq.ready r
                    WHERE r.queue_hash = hash AND r.priority = _fair_due.priority
                      AND r.fairness_key = _fair_due.fairness_key AND r.queue = _fair_due.queue
                      AND r.run_at <= now
                      AND (NOT paused OR NOT jobq._paused(r.queue, r.kind)));
END $$;

-- Whether a pause holds back the jobs of `kind` in `queue` (jobq_pause, src/sql/pause.sql).
CREATE FUNCTION jobq._paused(queue text, kind text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobq.pauses p
                    WHERE (p.queue = _paused.queue AND (p.kind IS NULL OR p.kind = _paused.kind))
                       OR (p.queue IS NULL AND p.kind = _paused.kind));
END $$;

-- Checkout of a call that may take from a fair queue (jobq._checkout sends it here): up to
-- `max_jobs` jobs claimed for `worker`, their ids in claim order. Each claim compares the job
-- each queue would give next (a fair queue: the job of the key whose turn it is; the others
-- together: their first job in claim order) by priority, run_at and id, as a checkout of
-- several queues compares them, and claims from the first (jobq._fair_claim; the others' first
-- job with FOR UPDATE SKIP LOCKED, a keyed one through jobq._claim_keyed). A source with
-- nothing it can give is left for the rest of the call. `grants`: a limited role's worker
-- patterns, for a call of every queue (NULL: not limited).
-- Under REPEATABLE READ or SERIALIZABLE each claim runs in a subtransaction, and one that
-- meets a row changed since the snapshot is skipped, as jobq._checkout_in_snapshot skips it.
CREATE FUNCTION jobq._checkout_fair(worker uuid, queues text[], max_jobs integer, now timestamptz,
                                    grants text[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_rc       boolean := current_setting('transaction_isolation') = 'read committed';
    v_paused   boolean := EXISTS (SELECT 1 FROM jobq.pauses);
    v_fair     text[];             -- the fair queues this call may take from
    v_plain    boolean;            -- whether it may take from other queues too
    v_claimed  bigint[] := '{}';
    v_skip     text[] := '{}';     -- fairness keys that yielded their turn (jobq._fair_claim)
    v_skip_c   text[] := '{}';     -- as jobq._checkout's: keys of the other queues that
    v_skip_l   integer[] := '{}';  -- could not start in this call
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
    v_best     record;
    v_job      bigint;
    c          record;
    v_blocked  "char";
BEGIN
    -- One descent of fairness_by_key per queue named, or per fair queue for a call of every
    -- queue (never a read of every key's row).
    IF queues IS NOT NULL THEN
        v_fair := ARRAY(SELECT DISTINCT q FROM unnest(queues) q
                         WHERE (SELECT true FROM jobq.fairness_keys f WHERE f.queue = q LIMIT 1));
    ELSE
        v_fair := ARRAY(SELECT q FROM jobq._fair_queues() q WHERE grants IS NULL OR jobq._sees(q, grants));
    END IF;
    v_plain := queues IS NULL OR NOT queues <@ v_fair;
    WHILE cardinality(v_claimed) < max_jobs AND (v_plain OR cardinality(v_fair) > 0) LOOP
        -- What each source would give next: (priority, run_at, id), the first wins. A call
        -- of one fair queue has nothing to compare.
        IF NOT v_plain AND cardinality(v_fair) = 1 THEN
            SELECT v_fair[1] AS src INTO v_best;
        ELSE
            SELECT s.src, s.priority, s.run_at, s.id INTO v_best
              FROM (SELECT NULL::text AS src, r.priority, r.run_at, r.id
                      FROM jobq.ready r
                     WHERE v_plain AND r.fairness_key IS NULL
                       AND (queues IS NULL OR r.queue = ANY (queues)) AND r.queue <> ALL (v_fair)
                       AND (grants IS NULL OR jobq._sees(r.queue, grants))
                       AND r.run_at <= now
                       AND (NOT v_paused OR NOT jobq._paused(r.queue, r.kind))
                       AND (r.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT 1) s
            UNION ALL
            SELECT q, n.priority, n.run_at, n.id
              FROM unnest(v_fair) q CROSS JOIN LATERAL jobq._fair_next(q, now, v_paused, v_skip) n
             ORDER BY 2, 3, 4
             LIMIT 1;
            IF NOT FOUND THEN
                EXIT;
            END IF;
        END IF;
        v_job := NULL;
        IF v_rc AND v_best.src IS NOT NULL THEN
            -- READ COMMITTED raises no 40001 here: the claim needs no subtransaction (one
            -- cost a claim about a third of its time).
            SELECT x.skip, x.job INTO v_skip, v_job FROM jobq._fair_claim(worker, v_best.src, now, v_paused, true, v_skip) x;
            IF v_job IS NULL THEN
                v_fair := array_remove(v_fair, v_best.src);  -- nothing more it can give
            END IF;
        ELSE
        BEGIN
            IF v_best.src IS NOT NULL THEN
                SELECT x.skip, x.job INTO v_skip, v_job FROM jobq._fair_claim(worker, v_best.src, now, v_paused, v_rc, v_skip) x;
                IF v_job IS NULL THEN
                    v_fair := array_remove(v_fair, v_best.src);  -- nothing more it can give
                END IF;
            ELSE
                SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key, r.rate_key INTO c
                  FROM jobq.ready r
                 WHERE r.fairness_key IS NULL
                   AND (queues IS NULL OR r.queue = ANY (queues)) AND r.queue <> ALL (v_fair)
                   AND (grants IS NULL OR jobq._sees(r.queue, grants))
                   AND r.run_at <= now
                   AND (r.priority, r.run_at, r.id) >= (v_best.priority, v_best.run_at, v_best.id)
                   AND (NOT v_paused OR NOT jobq._paused(r.queue, r.kind))
                   AND (r.concurrency_key IS NULL OR NOT EXISTS (
                           SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                            WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                   AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                   AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT 1
                   FOR UPDATE OF r SKIP LOCKED;
                IF NOT FOUND THEN
                    v_plain := false;  -- every one held by other checkouts
                ELSIF NOT c.keyed THEN
                    DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout_fair.worker, attempt = j.attempt + 1,
                           started_at = now
                     WHERE j.id = c.id AND j.state = 'ready';
                    v_job := c.id;
                ELSE
                    v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
                    IF v_blocked IS NULL THEN
                        v_job := c.id;
                    ELSIF v_blocked = 'c' THEN
                        v_skip_c := v_skip_c || c.concurrency_key;
                        v_skip_l := v_skip_l || c.concurrency_limit;
                    ELSIF v_blocked = 'u' THEN
                        v_skip_u := v_skip_u || c.while_key;
                    ELSE
                        v_skip_r := v_skip_r || c.rate_key;
                    END IF;
                END IF;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            -- (REPEATABLE READ, SERIALIZABLE) a row changed since our snapshot: that source
            -- gives nothing more to this call.
            IF v_best.src IS NOT NULL THEN
                v_fair := array_remove(v_fair, v_best.src);
            ELSE
                v_plain := false;
            END IF;
        END;
        END IF;
        IF v_job IS NOT NULL THEN
            v_claimed := v_claimed || v_job;
        END IF;
    END LOOP;
    RETURN v_claimed;
END $$;

-- The job fair queue `queue` would give next (jobq._fair_claim's choice, read without locking
-- anything): its priority, run_at and id; no row when none.
CREATE FUNCTION jobq._fair_next(queue text, now timestamptz, paused boolean, skip text[],
                                OUT priority integer, OUT run_at timestamptz, OUT id bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_hash  integer := hashtext(queue);
    v_from  integer := -2147483648;
    v_p     integer;
    v_key   text;
BEGIN
    LOOP
        v_p := jobq._fair_top(v_hash, queue, v_from, now);
        IF v_p IS NULL THEN
            RETURN;
        END IF;
        SELECT f.fairness_key INTO v_key FROM jobq.fairness f
         WHERE f.queue_hash = v_hash AND f.queue = _fair_next.queue AND f.priority = v_p
           AND jobq._fair_skip_entry(v_p, _fair_next.queue, f.fairness_key) <> ALL (skip)
           AND jobq._fair_due(v_hash, _fair_next.queue, f.fairness_key, v_p, now, paused)
         ORDER BY f.served
         LIMIT 1;
        IF NOT FOUND THEN
            -- (As jobq._fair_claim: where no key has a job at v_p, those without one.)
            v_key := NULL;
            FOUND := NOT EXISTS (SELECT 1 FROM jobq.fairness f WHERE f.queue_hash = v_hash AND f.queue = _fair_next.queue AND f.priority = v_p)
                     AND jobq._fair_skip_entry(v_p, _fair_next.queue, NULL) <> ALL (skip)
                     AND jobq._fair_due(v_hash, _fair_next.queue, NULL, v_p, now, paused);
        END IF;
        IF FOUND THEN
            IF v_key IS NULL THEN
                RETURN QUERY SELECT r.priority, r.run_at, r.id FROM jobq.ready r
                 WHERE r.queue_hash = v_hash AND r.queue = _fair_next.queue AND r.fairness_key IS NULL
                   AND r.priority = v_p AND r.run_at <= now
                   AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT 1;
            ELSE
                RETURN QUERY SELECT r.priority, r.run_at, r.id FROM jobq.ready r
                 WHERE r.queue_hash = v_hash AND r.priority = v_p AND r.fairness_key = v_key
                   AND r.queue = _fair_next.queue AND r.run_at <= now
                   AND (NOT paused OR NOT jobq._paused(r.queue, r.kind))
                 ORDER BY r.priority, r.fairness_key, r.run_at, r.id
                 LIMIT 1;
            END IF;
            RETURN;
        END IF;
        EXIT WHEN v_p = 2147483647;
        v_from := v_p + 1;
    END LOOP;
END $$;

-- The queues that take turns, one descent of fairness_by_key each (inside jobq._checkout and
-- the pass, whose settings it keeps).
CREATE FUNCTION jobq._fair_queues() RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    WITH RECURSIVE q(queue) AS (
        (SELECT f.queue FROM jobq.fairness_keys f ORDER BY f.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT f.queue FROM jobq.fairness_keys f WHERE f.queue > q.queue ORDER BY f.queue LIMIT 1)
          FROM q WHERE q.queue IS NOT NULL)
    SELECT q.queue FROM q WHERE q.queue IS NOT NULL;
END $$;

-- The pass's share (src/sql/reap.sql), its last step: a key's row at a priority where the key
-- has no waiting job goes, and so does the queue's row there for its jobs without a key once no
-- key's row is left there (a queue without rows is served as any other); a key's weight row
-- goes when its weight is 1 again; of two rows of one key at one priority (jobq._fair_keys),
-- the one served least recently stays. A queue is pruned only while no transaction is making
-- one of its keyed jobs ready (the advisory lock jobq._fair_keys holds shared), and its lock is
-- held until the pass commits: an enqueue that looks for a key's row after the prune waits for
-- the deletions to commit, and then inserts the row again. Only under READ COMMITTED, where
-- each statement's snapshot is taken after the lock. Rows a checkout holds are passed over.
-- One pass prunes at a time (another skips its prune): the last one's id in
-- jobq.fairness_pruned then tells a transaction snapshot that sees it over that it sees every
-- deletion of turns made so far (jobq._fair_keys). A copy in jobq.fairness_keys goes with each
-- row deleted, under the same lock: a key's copies are as many as its rows.
CREATE FUNCTION jobq._prune_fairness() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    q        text;
    v_set    bigint;
    v_idle   tid[];
    v_twins  tid[];
    v_gone   jobq.fairness_keys[];  -- the identities of the rows deleted
    v_more   jobq.fairness_keys[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed'
       OR NOT pg_try_advisory_xact_lock(1785684593, hashtext('fairness:prune')) THEN
        RETURN;  -- (another pass is pruning)
    END IF;
    FOR q IN SELECT jobq._fair_queues() LOOP
        -- What may go is found first, without the queue's lock: a key's row at a priority where
        -- the key has no waiting job, a weight row back at weight 1, and of two rows of one key
        -- at one priority (jobq._fair_keys) the one served more recently. That reads every row of
        -- the queue, and the queue's keyed enqueues waited for it while the lock was held (with
        -- 55,000 keys, some 75 ms of every second); under the lock only the rows found are looked
        -- at again. A key's look for a waiting job is one probe of ready_fair by its leading
        -- columns, a subquery per row (not NOT EXISTS: the planner made that an anti-join that
        -- read the queue's whole backlog).
        -- Not while a transaction is making one of the queue's keyed jobs ready (the lock is
        -- tried, and let go, first: the read would be for nothing).
        CONTINUE WHEN NOT pg_try_advisory_lock(1785684593, hashtext('fairness:' || q));
        PERFORM pg_advisory_unlock(1785684593, hashtext('fairness:' || q));
        v_idle := ARRAY(
            SELECT g.ctid FROM jobq.fairness g
             WHERE g.queue_hash = hashtext(q) AND g.queue = q
               AND CASE WHEN g.priority IS NULL THEN g.weight = 1
                        WHEN g.fairness_key IS NULL THEN false
                        ELSE (SELECT true FROM jobq.ready r
                               WHERE r.queue_hash = hashtext(q) AND r.priority = g.priority
                                 AND r.fairness_key = g.fairness_key AND r.queue = q
                               LIMIT 1) IS NULL END);
        -- One read of the queue's rows (an EXISTS per row read them all for each).
        v_twins := ARRAY(
            SELECT t.ctid
              FROM (SELECT h.ctid, row_number() OVER (PARTITION BY h.fairness_key, h.priority
                                                      ORDER BY h.served, h.ctid) AS n
                      FROM jobq.fairness h WHERE h.queue_hash = hashtext(q) AND h.queue = q) t
             WHERE t.n > 1);
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(1785684593, hashtext('fairness:' || q));
        -- Before any deletion (an assignment, not PERFORM: no plan started).
        v_set := coalesce(v_set, setval('jobq.fairness_pruned', pg_current_xact_id()::text::bigint));
        -- Under the lock, in a statement whose snapshot is taken after it, the rows found, each
        -- looked at again as above (an enqueue may have made a job of the key ready since; a
        -- moved row is no longer there), and locked before they are deleted. (The look for a
        -- waiting job is written out twice, here and above: the price of not holding enqueues.)
        WITH gone AS (
        DELETE FROM jobq.fairness f
         WHERE f.ctid = ANY (ARRAY(
                   SELECT g.ctid FROM jobq.fairness g
                    WHERE g.ctid = ANY (v_idle || v_twins) AND g.queue = q
                      AND CASE WHEN g.ctid = ANY (v_twins)
                               THEN (SELECT true FROM jobq.fairness h
                                      WHERE h.queue_hash = hashtext(q) AND h.queue = q AND h.priority IS NOT DISTINCT FROM g.priority
                                        AND (h.fairness_key = g.fairness_key OR h.fairness_key IS NULL AND g.fairness_key IS NULL)
                                        AND (h.served, h.ctid) < (g.served, g.ctid)
                                      LIMIT 1)
                               WHEN g.priority IS NULL THEN g.weight = 1
                               WHEN g.fairness_key IS NULL THEN false
                               ELSE (SELECT true FROM jobq.ready r
                                      WHERE r.queue_hash = hashtext(q) AND r.priority = g.priority
                                        AND r.fairness_key = g.fairness_key AND r.queue = q
                                      LIMIT 1) IS NULL END
                      FOR UPDATE OF g SKIP LOCKED))
        RETURNING f.queue, f.fairness_key, f.priority, f.weight)
        SELECT ARRAY(SELECT (g.queue, g.fairness_key, g.priority, g.weight)::jobq.fairness_keys FROM gone g) INTO v_gone;
        -- The queue's row for its jobs without a key at a priority where no key's row is left.
        WITH gone AS (
        DELETE FROM jobq.fairness f
         WHERE f.ctid = ANY (ARRAY(
                   SELECT g.ctid FROM jobq.fairness g
                    WHERE g.queue_hash = hashtext(q) AND g.queue = q AND g.fairness_key IS NULL AND g.priority IS NOT NULL
                      AND (SELECT true FROM jobq.fairness h
                            WHERE h.queue_hash = hashtext(q) AND h.queue = q AND h.fairness_key IS NOT NULL
                              AND h.priority = g.priority
                            LIMIT 1) IS NULL
                      FOR UPDATE SKIP LOCKED))
        RETURNING f.queue, f.fairness_key, f.priority, f.weight)
        SELECT ARRAY(SELECT (g.queue, g.fairness_key, g.priority, g.weight)::jobq.fairness_keys FROM gone g) INTO v_more;
        -- A copy for each row deleted: the n-th deleted row of an identity takes its n-th copy,
        -- found by fairness_by_key (`= fairness_key` or `IS NULL`, as in jobq._fair_keys).
        DELETE FROM jobq.fairness_keys k
         WHERE k.ctid = ANY (ARRAY(
                   SELECT CASE WHEN d.fairness_key IS NULL
                               THEN (SELECT c.ctid FROM jobq.fairness_keys c
                                      WHERE c.queue = q AND c.fairness_key IS NULL
                                        AND c.priority IS NOT DISTINCT FROM d.priority
                                      ORDER BY c.ctid OFFSET d.n - 1 LIMIT 1)
                               ELSE (SELECT c.ctid FROM jobq.fairness_keys c
                                      WHERE c.queue = q AND c.fairness_key = d.fairness_key
                                        AND c.priority IS NOT DISTINCT FROM d.priority
                                      ORDER BY c.ctid OFFSET d.n - 1 LIMIT 1) END
                     FROM (SELECT u.fairness_key, u.priority,
                                  row_number() OVER (PARTITION BY u.fairness_key, u.priority) AS n
                             FROM unnest(v_gone || v_more) u) d));
    END LOOP;
END $$;
