-- The completion of one job once its DELETE found it, pasted by scripts/build-sql-edition.py where
-- a twin's body says `@paste complete_one@` (this header left out): in jobq_complete, and in
-- jobq_complete_and_checkout with one job in hand, where a call of jobq_complete cost each job its
-- layers (src/sql/twins/hot_path.sql says how much). Each body's DELETE took the job out of
-- jobq.live_jobs into d (jobq.live_jobs) under READ COMMITTED: a job with no unique or
-- concurrency key to release, executing under the caller's own worker (its role, no role set),
-- where no queue grant limits a role. This moves it to the history as jobq._complete moves it,
-- counts it and tells the jobs that wait on it, and sets v_done (false before the DELETE) when the
-- DELETE found it; every other completion is jobq._complete's, which decides it whole. Both
-- bodies name job_id (the job's id), result (its result), v_done and d.
IF FOUND THEN
    d.finished_at := clock_timestamp();
    IF octet_length(d.queue) <= 200 THEN
        INSERT INTO jobq.tallies
        VALUES (d.queue, jobq._tally_minute(d.finished_at), 3::smallint, jobq._tally_took(d.started_at, d.finished_at));
    END IF;
    IF jobq.retention_ms() > 0 THEN
        d.state := 'completed';
        d.result := result;
        -- The row as one function scan's columns: `SELECT (d).*` reads each column out of the
        -- record in an expression of its own, which cost each job 19,000 instructions more
        -- (bench/instructions.sh, row jobq_sql).
        INSERT INTO jobq.finished_jobs SELECT * FROM pg_catalog.unnest(ARRAY[d]);
    END IF;
    IF EXISTS (SELECT 1 FROM jobq.edges x WHERE x.parent = job_id AND NOT x.settled) THEN
        PERFORM jobq._settle(ARRAY[job_id], ARRAY['completed']);
    END IF;
    v_done := true;
END IF;
