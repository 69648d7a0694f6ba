-- Observing: the per-queue summary dashboards read.

-- One row per queue with a job not yet pruned, at the cost of the unfinished jobs and of the
-- queues, whatever the history: the unfinished jobs are counted in jobq.live_jobs (the work in
-- flight), the dead ones through jobs_finished_unusual (of the history, only dead and cancelled
-- jobs have an entry there), and the queues of the rest of the history are found by one descent
-- of jobs_finished_by_queue per queue (the first queue name after the one before), without
-- reading their jobs. bench/dash.sh measures it over 10 million finished jobs.
CREATE VIEW jobq.queue_stats WITH (security_barrier) AS
WITH RECURSIVE t AS MATERIALIZED (SELECT clock_timestamp() AS now),
history (queue) AS (
    (SELECT f.queue FROM jobq.finished_jobs f ORDER BY f.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT f.queue FROM jobq.finished_jobs f WHERE f.queue > h.queue ORDER BY f.queue LIMIT 1)
      FROM history h
     WHERE h.queue IS NOT NULL
),
live AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
),
dead AS (
    SELECT f.queue, count(*) AS dead FROM jobq.finished_jobs f WHERE f.state = 'dead' GROUP BY f.queue
),
queues AS (
    SELECT h.queue FROM history h WHERE h.queue IS NOT NULL
    UNION
    SELECT l.queue FROM live l
)
SELECT q.queue,
       coalesce(l.ready, 0) AS ready,
       coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.executing, 0) AS executing,
       coalesce(d.dead, 0) AS dead,
       t.now - l.oldest_due AS oldest_ready_age
  FROM queues q CROSS JOIN t
  LEFT JOIN live l ON l.queue = q.queue
  LEFT JOIN dead d ON d.queue = q.queue
 -- a limited role's queues (src/sql/grants.sql)
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(q.queue, (SELECT jobq._patterns('reader')));

-- The same columns, one row per queue with a waiting, executing or dead job only (not the
-- queues whose jobs all completed or were cancelled): what the dashboard's pages show.
CREATE VIEW jobq.queue_depths WITH (security_barrier) AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
parts AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           0 AS dead,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
    UNION ALL
    -- Named columns: pg_dump writes this arm back as it reads it (an unnamed NULL comes back
    -- from a restore named after its type).
    SELECT f.queue, 0, 0, 0, count(*) AS dead, NULL::timestamptz AS oldest_due
      FROM jobq.finished_jobs f
     WHERE f.state = 'dead'
     GROUP BY f.queue
)
SELECT p.queue, sum(p.ready)::bigint AS ready, sum(p.scheduled)::bigint AS scheduled,
       sum(p.executing)::bigint AS executing, sum(p.dead)::bigint AS dead,
       t.now - min(p.oldest_due) AS oldest_ready_age
  FROM parts p CROSS JOIN t
 WHERE (SELECT jobq._patterns('reader')) IS NULL OR jobq._sees(p.queue, (SELECT jobq._patterns('reader')))  -- src/sql/grants.sql
 GROUP BY p.queue, t.now;
