-- Twins of src/counters.rs: per-queue, per-minute counts of what jobs did. The extension
-- notes them in shared memory and each pass moves them to jobq.queue_minutes; here each
-- event is a row of an unlogged table, which the pass takes the same way (rows of
-- transactions still open are taken by a later pass).
CREATE UNLOGGED TABLE jobq.tallies (
    queue  text NOT NULL,
    minute timestamptz NOT NULL,
    event  smallint NOT NULL,       -- 1 enqueued, 2 started, 3 completed, 4 failed, 5 dead
    took_us bigint                  -- wait (started) or run (completed, failed) time
);

-- The histograms' bucket bounds in milliseconds; the last is unbounded.
CREATE FUNCTION jobq.histogram_bounds() RETURNS double precision[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT '{1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,60000,120000,300000,600000,1800000,3600000,7200000,21600000,86400000,Infinity}'::double precision[]
$$;

-- A tally's columns: the minute of `at`, and the microseconds from `since` to `at` (a wait or a
-- run time, never below 0). Expressions PostgreSQL inlines where they are used, in integer and
-- float arithmetic: extract()'s numeric made each tally cost some 13,000 instructions more
-- (bench/instructions.sh, row jobq_sql). (A double holds a duration's microseconds exactly up
-- to 285 years.)
CREATE FUNCTION jobq._tally_minute(at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT date_bin('1 minute', at, '1970-01-01 00:00:00+00')
$$;

CREATE FUNCTION jobq._tally_took(since timestamptz, at timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT greatest(0, (date_part('epoch', at - since) * 1e6)::bigint)
$$;

-- A tally's row: the minute of `at` and, for a start or an end (events 2, 3 and 4), the
-- microseconds since `since`; no row for a queue name longer than 200 bytes (as src/counters.rs). A SQL
-- function PostgreSQL inlines into the statement that inserts the row (jobq._tally's). The fast
-- paths of src/sql/twins/hot_path.sql insert their rows themselves, with VALUES of the same
-- expressions under the same test of the name: the plan of `INSERT ... SELECT * FROM
-- jobq._tally_row(...)` cost each row some 16,000 instructions more (bench/instructions.sh,
-- row jobq_sql), and a call of jobq._tally, a PL/pgSQL layer, some 30,000 more.
-- Like every helper on a job's path, these leave the search_path to their callers, which pin it.
CREATE FUNCTION jobq._tally_row(queue text, event smallint, since timestamptz, at timestamptz)
RETURNS SETOF jobq.tallies
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT queue, jobq._tally_minute(at), event,
           CASE WHEN since IS NOT NULL AND event IN (2, 3, 4) THEN jobq._tally_took(since, at) END
     WHERE octet_length(queue) <= 200
$$;

CREATE FUNCTION jobq._tally(queue text, event text, since timestamptz, at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    v_event smallint := array_position(ARRAY['enqueued', 'started', 'completed', 'failed', 'dead'], event);
BEGIN
    IF v_event IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown event "%"', event USING ERRCODE = '22023';
    END IF;
    INSERT INTO jobq.tallies SELECT * FROM jobq._tally_row(queue, v_event, since, at);
    RETURN FOUND;
END $$;

-- The bucket of a duration, 1-based: the first whose bound is at least `ms` (src/counters.rs,
-- bucket_of). width_bucket counts the bounds at or below `ms`: the bucket is the next one,
-- unless `ms` is that bound itself.
CREATE FUNCTION jobq._bucket_of(ms double precision) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT w + (b[w] IS DISTINCT FROM ms)::integer
      FROM jobq.histogram_bounds() b, width_bucket(ms, b) w
$$;

-- How many of the durations `ms` fall in each bucket, each duration's bucket found once (a
-- look per bucket, 24 calls of jobq._bucket_of a duration, made a pass at 1,400 jobs/s take
-- seconds of CPU). jobq._bucket_of's expression is written out here: a call per duration (a
-- SQL function with its own search_path, never inlined) took 92 ms for 20,000 durations
-- against 22 ms (tests/sql_edition.rs holds the two equal).
CREATE FUNCTION jobq._histogram(ms double precision[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT array_agg(coalesce(c.n, 0) ORDER BY i)
      FROM generate_series(1, 24) i
      LEFT JOIN (SELECT w + (b[w] IS DISTINCT FROM m)::integer AS bucket, count(*) AS n
                   FROM jobq.histogram_bounds() b, unnest(ms) m, width_bucket(m, b) w
                  GROUP BY 1) c ON c.bucket = i
$$;

-- The pass's (jobq._flush_tallies): every tally so far, summed per queue and minute. An
-- enqueue's tally is also its queue's note for the deferred NOTIFY (src/sql/twins/wakes.sql):
-- this sends one for each queue whose enqueues it takes (the CTE `woken`, joined as one row so
-- that it runs), in the pass's transaction, as jobq._note_pass sends the other notes.
CREATE FUNCTION jobq._take_tallies()
RETURNS TABLE (queue text, minute timestamptz, enqueued bigint, started bigint, completed bigint, failed bigint,
               dead bigint, wait_ms bigint[], run_ms bigint[], wait_us bigint, run_us bigint)
LANGUAGE sql STRICT VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    WITH taken AS (
        DELETE FROM jobq.tallies RETURNING *
    ), woken AS (
        SELECT count(pg_notify('jobq', q.queue)) AS sent
          FROM (SELECT DISTINCT t.queue FROM taken t WHERE t.event = 1) q
    )
    SELECT t.queue, t.minute,
           count(*) FILTER (WHERE t.event = 1), count(*) FILTER (WHERE t.event = 2),
           count(*) FILTER (WHERE t.event = 3), count(*) FILTER (WHERE t.event = 4),
           count(*) FILTER (WHERE t.event = 5),
           jobq._histogram(coalesce(array_agg(t.took_us / 1000.0) FILTER (WHERE t.event = 2 AND t.took_us IS NOT NULL), '{}')),
           jobq._histogram(coalesce(array_agg(t.took_us / 1000.0) FILTER (WHERE t.event IN (3, 4) AND t.took_us IS NOT NULL), '{}')),
           coalesce(sum(t.took_us) FILTER (WHERE t.event = 2), 0)::bigint,
           coalesce(sum(t.took_us) FILTER (WHERE t.event IN (3, 4)), 0)::bigint
      FROM taken t, woken
     GROUP BY t.queue, t.minute
$$;

CREATE FUNCTION jobq._histogram_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT coalesce(array_agg(coalesce(a[i], 0) + coalesce(b[i], 0) ORDER BY i), '{}')
      FROM generate_series(1, greatest(coalesce(array_length(a, 1), 0), coalesce(array_length(b, 1), 0))) i
$$;

-- The q-quantile, interpolated linearly inside its bucket (the unbounded last bucket answers
-- its lower bound); NULL when the histogram is empty.
CREATE FUNCTION jobq.histogram_quantile(hist bigint[], q double precision) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_bounds double precision[] := jobq.histogram_bounds();
    v_total  bigint := (SELECT coalesce(sum(n), 0) FROM unnest(hist) n);
    v_rank   double precision := q * v_total;
    v_below  bigint := 0;
    v_lo     double precision;
    n        bigint;
BEGIN
    IF v_total <= 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. least(coalesce(array_length(hist, 1), 0), 24) LOOP
        n := coalesce(hist[i], 0);
        IF n > 0 AND v_below + n >= v_rank THEN
            v_lo := CASE WHEN i = 1 THEN 0 ELSE v_bounds[i - 1] END;
            IF v_bounds[i] = 'Infinity' THEN
                RETURN v_lo;
            END IF;
            RETURN v_lo + (v_bounds[i] - v_lo) * greatest(0, least(1, (v_rank - v_below) / n));
        END IF;
        v_below := v_below + n;
    END LOOP;
    RETURN v_bounds[23];
END $$;
