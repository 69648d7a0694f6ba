-- The dashboard's counters: per queue and minute, what jobs did (src/counters.rs keeps them
-- in shared memory as jobs move; every reap pass adds them here and prunes the old minutes).
-- A dashboard reads jobq.throughput(), which never reads the job history: a page costs the
-- same at 10 million finished jobs.

-- One row per queue and minute with activity. The minute is the start of the minute when it
-- happened (the end of the attempt for completed, failed and dead; the start for started).
-- wait_ms and run_ms are histograms: the number of jobs per bucket of
-- jobq.histogram_bounds() (milliseconds), of the wait from due (run_at) to started and of
-- the run from started to completed or failed; wait_us and run_us are their sums, in
-- microseconds.
CREATE TABLE jobq.queue_minutes (
    queue      text        NOT NULL,
    minute     timestamptz NOT NULL,
    enqueued   bigint      NOT NULL,
    started    bigint      NOT NULL,
    completed  bigint      NOT NULL,
    failed     bigint      NOT NULL,  -- attempts that failed (jobq_fail) or were interrupted (reaped)
    dead       bigint      NOT NULL,  -- jobs that became dead
    wait_ms    bigint[]    NOT NULL,
    run_ms     bigint[]    NOT NULL,
    wait_us    bigint      NOT NULL DEFAULT 0,
    run_us     bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);
CREATE INDEX queue_minutes_by_minute ON jobq.queue_minutes (minute);
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_minutes', '');

-- The same counts per queue since it was first counted, never pruned: counters that only go
-- up, for monitoring systems (Prometheus' counters and histograms, jobq-dash's /metrics).
CREATE TABLE jobq.queue_totals (
    queue      text     PRIMARY KEY,
    enqueued   bigint   NOT NULL,
    started    bigint   NOT NULL,
    completed  bigint   NOT NULL,
    failed     bigint   NOT NULL,
    dead       bigint   NOT NULL,
    wait_ms    bigint[] NOT NULL,
    run_ms     bigint[] NOT NULL,
    wait_us    bigint   NOT NULL,
    run_us     bigint   NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_totals', '');

-- The sum of histograms, bucket by bucket.
CREATE AGGREGATE jobq.histogram_sum(bigint[]) (
    SFUNC = jobq._histogram_add, STYPE = bigint[], INITCOND = '{}', PARALLEL = SAFE
);

-- The reap pass's part (jobq._reap): adds what shared memory counted since the last pass to
-- jobq.queue_minutes and jobq.queue_totals, and prunes minutes older than jobq.retention, or than an hour when
-- retention is shorter (the dashboard's hour chart). One pass at a time: two would wait on
-- each other's rows until their commits (and a pass never waits, see reap.sql), so a pass that
-- finds another one flushing leaves the counts in shared memory for its next turn. A pass
-- that does not commit gives its counts back to shared memory (src/counters.rs).
CREATE FUNCTION jobq._flush_tallies(now timestamptz, keep interval) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    -- A transaction-level advisory lock of class 'jobq', as in jobq._take_slot.
    IF NOT pg_try_advisory_xact_lock(1785684593, hashtext('jobq.queue_minutes')) THEN
        RETURN;
    END IF;
    WITH t AS (
        SELECT * FROM jobq._take_tallies()
    ), minutes AS (
        INSERT INTO jobq.queue_minutes AS m
        SELECT * FROM t
        ON CONFLICT (queue, minute) DO UPDATE
           SET enqueued = m.enqueued + excluded.enqueued, started = m.started + excluded.started,
               completed = m.completed + excluded.completed, failed = m.failed + excluded.failed,
               dead = m.dead + excluded.dead,
               wait_ms = jobq._histogram_add(m.wait_ms, excluded.wait_ms),
               run_ms = jobq._histogram_add(m.run_ms, excluded.run_ms),
               wait_us = m.wait_us + excluded.wait_us, run_us = m.run_us + excluded.run_us
    )
    INSERT INTO jobq.queue_totals AS q
    SELECT t.queue, sum(t.enqueued), sum(t.started), sum(t.completed), sum(t.failed), sum(t.dead),
           jobq.histogram_sum(t.wait_ms), jobq.histogram_sum(t.run_ms), sum(t.wait_us), sum(t.run_us)
      FROM t
     GROUP BY t.queue
    ON CONFLICT (queue) DO UPDATE
       SET enqueued = q.enqueued + excluded.enqueued, started = q.started + excluded.started,
           completed = q.completed + excluded.completed, failed = q.failed + excluded.failed,
           dead = q.dead + excluded.dead,
           wait_ms = jobq._histogram_add(q.wait_ms, excluded.wait_ms),
           run_ms = jobq._histogram_add(q.run_ms, excluded.run_ms),
           wait_us = q.wait_us + excluded.wait_us, run_us = q.run_us + excluded.run_us;
    DELETE FROM jobq.queue_minutes m WHERE m.minute < now - greatest(keep, interval '1 hour');
END $$;

-- Throughput and latency per queue since `since`, in buckets of `step` (a whole number of
-- minutes, at most a day; buckets start at multiples of `step` since 2000-01-01 UTC): one row
-- per queue and bucket with activity. Percentiles are in milliseconds, NULL when nothing was
-- measured in the bucket.
CREATE FUNCTION jobq.throughput(since timestamptz, step interval DEFAULT '1 minute')
RETURNS TABLE (queue text, bucket timestamptz, enqueued bigint, started bigint, completed bigint,
               failed bigint, dead bigint, wait_p50_ms double precision, wait_p95_ms double precision,
               run_p50_ms double precision, run_p95_ms double precision)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_origin constant timestamptz := '2000-01-01 00:00:00+00';
BEGIN
    IF since IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'jobq: since and step must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(since) THEN
        RAISE EXCEPTION 'jobq: since must be a finite time, got %', since USING ERRCODE = '22023';
    ELSIF step < interval '1 minute' OR step > interval '1 day' OR extract(month FROM step) <> 0
          OR extract(epoch FROM step)::numeric % 60 <> 0 THEN
        RAISE EXCEPTION 'jobq: step must be a whole number of minutes, at most a day, got %', step
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.queue, date_bin(step, m.minute, v_origin) AS b,
           sum(m.enqueued)::bigint, sum(m.started)::bigint, sum(m.completed)::bigint,
           sum(m.failed)::bigint, sum(m.dead)::bigint,
           jobq.histogram_quantile(jobq.histogram_sum(m.wait_ms), 0.5),
           jobq.histogram_quantile(jobq.histogram_sum(m.wait_ms), 0.95),
           jobq.histogram_quantile(jobq.histogram_sum(m.run_ms), 0.5),
           jobq.histogram_quantile(jobq.histogram_sum(m.run_ms), 0.95)
      FROM jobq.queue_minutes m
     WHERE m.minute >= date_bin(step, since, v_origin)
     GROUP BY m.queue, b
     ORDER BY m.queue, b;
END $$;
