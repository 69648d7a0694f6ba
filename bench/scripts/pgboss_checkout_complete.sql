-- pg-boss 12.38.0, a worker's fetch then complete, two transactions per job: what boss.work('bench',
-- handler) with default options (batchSize 1) runs per job, fetchNextJob then completeJobs from
-- dist/plans.js as #fetch and complete in dist/manager.js build them (the complete fenced to the
-- fetched attempt, as the worker passes the job with its retryCount; trace_context fetched since
-- telemetry is on by default); checked against the statements a real worker logged. Parameters
-- written in: $1 is 'bench'; $2, '{<id>}', and $4, '{<id>:<retryCount>}', are arrays built from the
-- \gset values; $3, the output, is NULL, as left by a handler that returns nothing.
WITH
next AS (
  SELECT j.id
  FROM pgboss.job_common j
  WHERE j.name = 'bench'
    AND j.state < 'active'
    AND NOT j.blocked
    AND j.start_after <= pgboss.job_now()
  ORDER BY j.priority desc, j.created_on
  LIMIT 1
  FOR UPDATE OF j SKIP LOCKED
)
UPDATE pgboss.job_common j SET
  state = 'active',
  started_on = pgboss.job_now(),
  heartbeat_on = pgboss.job_now(),
  retry_count = CASE WHEN started_on IS NOT NULL THEN retry_count + 1 ELSE retry_count END
FROM next
WHERE name = 'bench' AND j.id = next.id
RETURNING j.id, name, data, retry_count as "retryCount", expire_seconds as "expireInSeconds", heartbeat_seconds as "heartbeatSeconds", group_id as "groupId", group_tier as "groupTier", j.trace_context as "__traceContext" \gset p_
WITH results AS (
  UPDATE pgboss.job_common
  SET completed_on = pgboss.job_now(),
    state = 'completed',
    output = NULL::jsonb,
    blocked = blocked,
    pending_dependencies = pending_dependencies
  WHERE name = 'bench'
    AND id = ANY(ARRAY[:p_id::uuid])
    AND state = 'active'
    AND state = 'active'
    AND (id::text || ':' || retry_count::text) = ANY(ARRAY[:p_id::text || ':' || :p_retryCount::text])
  RETURNING id
)
SELECT COUNT(*), COALESCE(array_agg(id), '{}'::uuid[]) AS ids FROM results;
