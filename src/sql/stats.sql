-- Observing: the per-queue summary dashboards read.

CREATE VIEW jobq.queue_stats AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now)  -- one instant for every row
SELECT j.queue,
       count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
       count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
       count(*) FILTER (WHERE j.state = 'executing') AS executing,
       count(*) FILTER (WHERE j.state = 'dead') AS dead,
       t.now - min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_ready_age
  FROM jobq.jobs j CROSS JOIN t
 GROUP BY j.queue, t.now;

-- The same columns for dashboards at scale: one row per queue with a waiting, executing or
-- dead job (not the queues whose jobs all completed or were cancelled), read from the live
-- jobs and from the index of dead ones (jobs_finished_unusual), never from the rest of the
-- history, where jobq.queue_stats reads every finished job to know which queues have one.
CREATE VIEW jobq.queue_depths AS
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
    SELECT f.queue, 0, 0, 0, count(*), NULL
      FROM jobq.finished_jobs f
     WHERE f.state = 'dead'
     GROUP BY f.queue
)
SELECT p.queue, sum(p.ready)::bigint AS ready, sum(p.scheduled)::bigint AS scheduled,
       sum(p.executing)::bigint AS executing, sum(p.dead)::bigint AS dead,
       t.now - min(p.oldest_due) AS oldest_ready_age
  FROM parts p CROSS JOIN t
 GROUP BY p.queue, t.now;
