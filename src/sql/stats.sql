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
