-- The checkout of one plain job, pasted by scripts/build-sql-edition.py where a twin's body says
-- `@paste checkout_one@` (this header left out): in jobq_checkout, under its conditions
-- (src/sql/twins/hot_path.sql says why each), and in jobq_complete_and_checkout with one job in
-- hand, where a call of jobq_checkout cost each job 53,000 instructions more. It returns from
-- the function with the job claimed, or with none when none is due; it falls through to the
-- general path (jobq._checkout) when a condition fails or the first job has a key to take.
-- Both bodies declare v_queue (queues[1]), v_now, c (record), j (jobq.job) and v_done: true
-- where this call's completion left the job by complete_one.sql's DELETE, which found the worker
-- the caller's own (no role set) in this transaction; NULL in jobq_checkout. A worker's owner
-- never changes and a role is not set within the call: the test of the caller is not made
-- again, 10,000 instructions a job (row jobq_sql_worker, 822,698 at 5a79413 against 812,757).
-- The worker: the common case of jobq._usable_worker (an unbound worker of the caller's with a
-- fresh heartbeat, no role set) tested here, in the condition's one statement, saved each job
-- about 9,000 and 11,000 instructions (rows jobq_sql, jobq_sql_worker); every other worker (one bound
-- to its session, as the client libraries' are) is that function's to decide whole.
IF (queues IS NULL OR (cardinality(queues) > 0 AND array_position(queues, NULL) IS NULL))
   AND current_setting('transaction_isolation') = 'read committed'
   AND NOT EXISTS (SELECT 1 FROM jobq.pauses) AND NOT EXISTS (SELECT 1 FROM jobq.queue_grants)
   -- (Two looks, as jobq._checkout's: one condition for both would read every key's row.)
   AND NOT (CASE WHEN queues IS NULL THEN EXISTS (SELECT 1 FROM jobq.fairness_keys)
                 ELSE EXISTS (SELECT 1 FROM jobq.fairness_keys f WHERE f.queue = ANY (queues)) END)
   AND (EXISTS (SELECT 1 FROM jobq.workers w
                 WHERE w.id = worker AND w.stopping_at IS NULL AND w.backend_pid IS NULL
                   AND w.heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
                   AND (v_done OR w.owner::oid = jobq._caller() AND pg_catalog.current_setting('role') = 'none'))
        OR jobq._usable_worker(worker)) THEN
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
