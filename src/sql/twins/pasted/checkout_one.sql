-- The checkout of one plain job, pasted by scripts/build-sql-edition.py where a twin's body says
-- `@paste checkout_one@` (this header left out), after look_one.sql: in jobq_checkout, under its
-- conditions (src/sql/twins/hot_path.sql says why each), and in jobq_complete_and_checkout with
-- one job in hand, where a call of jobq_checkout cost each job 53,000 instructions more. It
-- returns from the function with the job claimed, or with none when none is due; it falls
-- through to the general path (jobq._checkout) when a condition fails or the first job has a key
-- to take. Both bodies declare v_queue (queues[1]), v_now, c (record) and j (jobq.job).
-- The worker: the common cases of jobq._usable_worker (the caller's own worker, not stopping, a
-- fresh heartbeat, no role set; unbound, or bound to this session as the client libraries bind
-- theirs) are decided from what the look read (jobq._usable_here, src/sql/twins/liveness.sql,
-- for a bound one); every other worker is jobq._usable_worker's to decide whole.
IF (queues IS NULL OR (cardinality(queues) > 0 AND array_position(queues, NULL) IS NULL))
   AND (v_ungranted AND v_plain) IS TRUE
   AND (v_mine AND v_live AND v_pid IS NULL OR jobq._usable_here(worker, v_mine AND v_live, v_pid, v_start)) THEN
    v_now := clock_timestamp();
    -- The two differ only in the queue condition, so that each gets the index that serves
    -- its order (as jobq._checkout's).
    IF cardinality(queues) = 1 THEN
        SELECT r.ctid AS rid, r.id, r.keyed INTO c FROM jobq.ready r
         WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.fairness_key IS NULL
           AND r.run_at <= v_now
         ORDER BY r.priority, r.run_at, r.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.ctid AS rid, r.id, r.keyed INTO c FROM jobq.ready r
         WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.fairness_key IS NULL
           AND r.run_at <= v_now
         ORDER BY r.priority, r.run_at, r.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
    END IF;
    IF NOT FOUND THEN
        RETURN;
    ELSIF NOT c.keyed THEN
        DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
        UPDATE jobq.live_jobs x
           SET state = 'executing', worker_id = worker, attempt = x.attempt + 1, started_at = v_now
         WHERE x.id = c.id AND x.state = 'ready'
        RETURNING x.id, x.queue, x.kind, x.payload, x.priority, x.attempt, x.max_attempts, x.run_at,
                  x.enqueued_at, x.unique_key, x.concurrency_key, x.interrupted_at, x.last_error,
                  x.unique_strategy, x.concurrency_limit, x.started_at, x.depends_on, x.checkpoints,
                  x.fairness_key INTO j;
        IF FOUND THEN
            IF octet_length(j.queue) <= 200 THEN
                INSERT INTO jobq.tallies
                VALUES (j.queue, jobq._tally_minute(v_now), 2::smallint, jobq._tally_took(j.run_at, v_now));
            END IF;
            RETURN NEXT j;
        END IF;
        RETURN;
    END IF;
END IF;
