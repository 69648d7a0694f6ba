-- Rate limits: jobq_set_rate_limit, and jobq._take_rate, which checkout calls for a job with
-- a rate key (jobq._claim_keyed, src/sql/checkout.sql).
--
-- A limit of N starts per window `per` is N slots, each holding the time of the last start
-- that used it. A start takes a slot whose last start is more than `per` ago and writes its
-- own start time there, so any window of length `per` holds at most one start per slot: at
-- most N in all, exactly, whatever the interleaving (a sliding window, not a fixed one: no
-- burst of 2N across a window boundary). Taking a slot is an UPDATE of a row that is locked
-- with SKIP LOCKED and re-checked on its newest version, so two checkouts never take one
-- slot and a checkout never waits for another; a checkout that rolls back gives its start
-- back. The time written is the claim's own (the job's `started_at`).
--
-- A change of a key's limit rewrites its slots, and must see every start made (else a start
-- in flight would be forgotten and the window could take one more). Takers and changes of a
-- key meet on one transaction-level advisory lock of class 'jobq' (as jobq._take_slot's) on
-- hashtext('r:' || key): a taker that finds a slot free tries it shared and, when a change
-- holds it, passes the key over for this call without waiting; a change takes it
-- exclusively, waiting for the transactions that went to take a start to end, so it reads and
-- rewrites the slots while none is taking one. A change never holds a slot row while it
-- waits: locking the slots instead (FOR UPDATE, one after another) deadlocked with takers,
-- whose SKIP LOCKED still waits for a row that it reaches through an update committed during
-- its own attempt (PostgreSQL follows the update chain and waits on the newer version's
-- locker). One cycle is left to the caller: a transaction that took starts of a key (its
-- checkout) and then changes that key's limit waits for the others' starts while holding
-- its own, so it can deadlock (40P01) with another doing the same or, rarely, with a
-- checkout of the key; change limits in transactions of their own.

CREATE TABLE jobq.rate_limits (
    key         text PRIMARY KEY,
    max_starts  integer NOT NULL,
    per         interval NOT NULL,
    set_at      timestamptz NOT NULL
);
CREATE TABLE jobq.rate_slots (
    key         text NOT NULL,
    slot        integer NOT NULL,          -- 1..max_starts, then spares (jobq_set_rate_limit)
    last_start  timestamptz NOT NULL,      -- '-infinity': never used
    PRIMARY KEY (key, slot)
)
-- Updated at every start of a rate-limited job (and re-indexed: rate_slots_oldest): vacuumed
-- after a fixed number of dead rows, like jobq.slots.
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);
-- A start looks for the key's least recently used slot: through this index it reads one entry,
-- not every slot of the key (a limit may have 10,000).
CREATE INDEX rate_slots_oldest ON jobq.rate_slots (key, last_start);
SELECT pg_catalog.pg_extension_config_dump('jobq.rate_limits', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.rate_slots', '');

CREATE FUNCTION jobq_set_rate_limit(key text, max_starts integer, per interval) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_recent timestamptz[];
    v_noted  boolean;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'jobq: key must not be NULL' USING ERRCODE = '22004';
    ELSIF key = '' OR octet_length(key) > 1000 THEN
        RAISE EXCEPTION 'jobq: key must be 1 to 1000 bytes' USING ERRCODE = '22023';
    ELSIF max_starts IS NOT NULL THEN
        IF per IS NULL THEN
            RAISE EXCEPTION 'jobq: per must not be NULL' USING ERRCODE = '22004';
        ELSIF max_starts < 1 OR max_starts > 10000 THEN
            RAISE EXCEPTION 'jobq: max_starts must be between 1 and 10000, got %', max_starts USING ERRCODE = '22023';
        ELSIF per <= interval '0' OR NOT isfinite(per) THEN
            RAISE EXCEPTION 'jobq: per must be a finite interval greater than 0, got %', per USING ERRCODE = '22023';
        END IF;
    END IF;
    -- The key's lock (above): from here to the commit no start of the key is in progress.
    PERFORM pg_advisory_xact_lock(1785684593, hashtext('r:' || key));
    -- A limit removed or changed may let waiting jobs start now: every waiting checkout of
    -- this database looks again after the commit (src/waits.rs).
    v_noted := jobq._wake(NULL, '-infinity', 10000);
    IF max_starts IS NULL THEN
        -- No limit any more: the key's jobs start as plain ones.
        DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
        DELETE FROM jobq.rate_limits l WHERE l.key = jobq_set_rate_limit.key;
        RETURN;
    END IF;
    INSERT INTO jobq.rate_limits AS l (key, max_starts, per, set_at)
    VALUES (key, max_starts, per, clock_timestamp())
    ON CONFLICT ON CONSTRAINT rate_limits_pkey
    DO UPDATE SET max_starts = EXCLUDED.max_starts, per = EXCLUDED.per, set_at = EXCLUDED.set_at;
    -- The slots anew, keeping every start already made, the most recent in the slots the
    -- limit uses (1..max_starts) and the older ones in spare slots above it, which a start
    -- never takes but a later raise of the limit finds again: so a limit lowered and raised
    -- again counts the starts made meanwhile, and no window ever holds more starts than the
    -- highest limit it saw. (Under READ COMMITTED this statement's snapshot, taken after the
    -- lock, sees every start made; under REPEATABLE READ a start committed since the
    -- transaction's snapshot makes the DELETE raise 40001.)
    v_recent := ARRAY(SELECT s.last_start FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key
                       ORDER BY s.last_start DESC);
    DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
    INSERT INTO jobq.rate_slots (key, slot, last_start)
    SELECT key, g.slot, coalesce(v_recent[g.slot], '-infinity')
      FROM generate_series(1, greatest(max_starts, cardinality(v_recent))) AS g(slot);
END $$;

-- Takes one start of rate key `key` at time `started` for a job being claimed: true when the
-- key has no limit or a slot was free (see above), false when its window is full.
CREATE FUNCTION jobq._take_rate(key text, started timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- A full window, or a key without a limit, is answered without the key's lock: only a
    -- checkout that finds a slot free holds it, so a change waits for the checkouts that
    -- went to take a start, not for every one that found the window full.
    IF NOT EXISTS (SELECT 1 FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                    WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                      AND x.slot <= l.max_starts) THEN
        RETURN NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
    END IF;
    -- The key's lock, shared with its other takers and tried without waiting: a change of
    -- the key's limit holds it (or, rarely, another key's of the same hash), and the key has
    -- no start for this call; that change's commit wakes the waiting checkouts (once its
    -- locks are released, src/xact.rs).
    IF NOT pg_try_advisory_xact_lock_shared(1785684593, hashtext('r:' || key)) THEN
        RETURN false;
    END IF;
    -- The window and the slots are read by one statement, so a limit changed meanwhile is
    -- seen whole or not at all (jobq_set_rate_limit rewrites the slots with the limit).
    UPDATE jobq.rate_slots s SET last_start = started
     WHERE s.ctid = (SELECT x.ctid FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                      WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                        AND x.slot <= l.max_starts
                      ORDER BY x.last_start
                      LIMIT 1
                        FOR UPDATE OF x SKIP LOCKED);
    RETURN FOUND OR NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
END $$;
