-- Observing, for dashboards (jobq_reader reads all of it; privileges.sql): what keys and rate
-- limits hold, how jobq's tables and the background worker are doing. Each view reads small
-- tables or statistics, never the job history: a page load costs the same at 10 million jobs.
-- (The per-queue summary is jobq.queue_stats, src/sql/stats.sql; schedules are
-- jobq.schedules, src/sql/schedules.sql.)

-- Concurrency slots in use: one row per concurrency or while_executing key with executing jobs.
CREATE VIEW jobq.concurrency_slots WITH (security_barrier) AS
SELECT CASE s.ns WHEN 'c' THEN 'concurrency' ELSE 'while_executing' END AS kind,
       s.key,
       count(*) AS executing,
       max(CASE WHEN s.ns = 'c' THEN j.concurrency_limit ELSE 1 END) AS max_limit,
       min(j.started_at) AS oldest_started_at
  FROM jobq.live_jobs j  -- before jobq.slots: the hot tables' lock order (src/sql/compact.sql)
  JOIN jobq.slots s ON s.job_id = j.id
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(j.queue, (SELECT jobq._patterns('reader')))  -- a limited role's queues' jobs (src/sql/grants.sql)
 GROUP BY s.ns, s.key;

-- Rate limits and their windows now: starts in the last `per` (one per slot whose last start
-- is that recent, src/sql/rate_limits.sql) and, when the window is full, when the next start
-- may come.
CREATE VIEW jobq.rate_windows WITH (security_barrier) AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT l.key, l.max_starts, l.per,
       count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) AS starts_in_window,
       CASE WHEN count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) >= l.max_starts
            THEN min(s.last_start) FILTER (WHERE s.slot <= l.max_starts) + l.per END AS next_start_at
  FROM jobq.rate_limits l
 CROSS JOIN t
  LEFT JOIN jobq.rate_slots s ON s.key = l.key
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(l.key, (SELECT jobq._patterns('reader')))  -- rate keys as lock keys (src/sql/grants.sql)
 GROUP BY l.key, l.max_starts, l.per, t.now;

-- jobq's tables as the statistics collector sees them: dead rows are what a snapshot held
-- elsewhere keeps (docs/operations.md, "Long transactions elsewhere"). Sizes are the catalog's page counts
-- of the table and its indexes (as of their last vacuum or analyze), not pg_relation_size(),
-- which locks the table: a dashboard must not hang behind a table's ACCESS EXCLUSIVE lock.
CREATE VIEW jobq.table_stats AS
SELECT s.relname::text AS table_name, s.n_live_tup AS live_rows, s.n_dead_tup AS dead_rows,
       round(s.n_dead_tup::numeric / nullif(s.n_live_tup + s.n_dead_tup, 0), 3) AS dead_share,
       (c.relpages + coalesce((SELECT sum(i.relpages) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                                WHERE x.indrelid = s.relid), 0))::bigint
           * current_setting('block_size')::bigint AS approx_bytes,
       greatest(s.last_autovacuum, s.last_vacuum) AS last_vacuum
  FROM pg_stat_user_tables s
  JOIN pg_class c ON c.oid = s.relid
 WHERE s.schemaname = 'jobq';

-- What holds back vacuum of this database's tables, jobq's included, the oldest first: a
-- session's snapshot or transaction id, a replication slot, a prepared transaction. Runs as
-- the extension's owner so that a jobq_reader sees other roles' sessions (their role, state
-- and ages; not their queries).
CREATE FUNCTION jobq._oldest_horizon()
RETURNS TABLE (holder text, pid integer, role text, state text, xact_age interval, xmin_age integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT h.* FROM (
        SELECT 'session'::text, a.pid, a.usename::text, a.state, clock_timestamp() - a.xact_start,
               age(coalesce(a.backend_xmin, a.backend_xid))
          FROM pg_stat_activity a
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND coalesce(a.backend_xmin, a.backend_xid) IS NOT NULL
           -- A vacuum's snapshot holds back no other vacuum (PROC_IN_VACUUM).
           AND a.backend_type <> 'autovacuum worker'
        UNION ALL
        SELECT 'replication slot ' || r.slot_name, r.active_pid, NULL, CASE WHEN r.active THEN 'active' ELSE 'inactive' END,
               NULL, age(r.xmin)
          FROM pg_replication_slots r
         WHERE r.xmin IS NOT NULL
        UNION ALL
        SELECT 'prepared transaction ' || p.gid, NULL, p.owner::text, 'prepared', clock_timestamp() - p.prepared,
               age(p.transaction)
          FROM pg_prepared_xacts p
         WHERE p.database = current_database()
    ) AS h (holder, pid, role, state, xact_age, xmin_age)
    -- Ties (every snapshot taken while a transaction runs has that transaction's id as its
    -- xmin): the one open longest.
    ORDER BY h.xmin_age DESC, h.xact_age DESC NULLS LAST
    LIMIT 1
$$;

-- One row: this database's background worker (its last reap pass since the server started,
-- src/health.rs; NULL columns when none ran: no preload, or not served), the oldest holder of
-- the vacuum horizon, the dead-row share of jobq's tables, and how full PostgreSQL's NOTIFY
-- queue is (0 to 1; a full queue makes NOTIFY fail).
CREATE VIEW jobq.health AS
SELECT current_database()::text AS database,
       p.ended_at AS last_pass_at, p.took_ms AS last_pass_ms, p.error AS last_pass_error,
       p.workers_reaped, p.jobs_requeued, p.jobs_dead, p.locks_released, p.jobs_pruned,
       h.holder AS horizon_holder, h.pid AS horizon_pid, h.role AS horizon_role, h.state AS horizon_state,
       h.xact_age AS horizon_xact_age, h.xmin_age AS horizon_xmin_age,
       (SELECT round(sum(t.dead_rows)::numeric / nullif(sum(t.live_rows + t.dead_rows), 0), 3)
          FROM jobq.table_stats t) AS dead_share,
       pg_notification_queue_usage() AS notify_queue_usage
  FROM (SELECT) AS one
  LEFT JOIN jobq._last_pass() p ON true
  LEFT JOIN jobq._oldest_horizon() h ON true;

-- jobq_version(): the release installed here, and its edition: 'extension' (this library) or
-- 'sql' (the SQL edition, jobq-sql--V.sql, where jobq._edition is SQL).
CREATE FUNCTION jobq_version() RETURNS TABLE (version text, edition text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT e.version, e.edition FROM jobq._edition() e $$;
