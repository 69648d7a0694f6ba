-- pg-boss 12.38.0, steady state: send one job, then fetch one and complete it (three
-- transactions). SQL as in pgboss_enqueue.sql and pgboss_checkout_complete.sql.
INSERT INTO pgboss.job_common (
  id,
  name,
  data,
  priority,
  start_after,
  created_on,
  singleton_key,
  singleton_on,
  group_id,
  group_tier,
  expire_seconds,
  deletion_seconds,
  keep_until,
  retry_limit,
  retry_delay,
  retry_backoff,
  retry_delay_max,
  policy,
  dead_letter,
  heartbeat_seconds,
  blocked,
  blocking,
  pending_dependencies,
  trace_context
)
SELECT
  COALESCE(id, gen_random_uuid()) as id,
  'bench' as name,
  data,
  COALESCE(priority, 0) as priority,
  j.start_after,
  pgboss.job_now() as created_on,
  "singletonKey",
  CASE
    WHEN "singletonSeconds" IS NOT NULL THEN 'epoch'::timestamp + '1s'::interval * ("singletonSeconds"::float8 * floor(( date_part('epoch', pgboss.job_now()) + COALESCE("singletonOffset",0)::float8) / "singletonSeconds"::float8 ))
    ELSE NULL
    END as singleton_on,
  "groupId" as group_id,
  "groupTier" as group_tier,
  COALESCE("expireInSeconds", q.expire_seconds, 900) as expire_seconds,
  COALESCE("deleteAfterSeconds", q.deletion_seconds, 604800) as deletion_seconds,
  j.start_after + (COALESCE("retentionSeconds", q.retention_seconds, 1209600) * interval '1s') as keep_until,
  COALESCE("retryLimit", q.retry_limit, 2) as retry_limit,
  COALESCE("retryDelay", q.retry_delay, 0) as retry_delay,
  COALESCE("retryBackoff", q.retry_backoff, false) as retry_backoff,
  COALESCE("retryDelayMax", q.retry_delay_max) as retry_delay_max,
  q.policy,
  COALESCE("deadLetter", q.dead_letter) as dead_letter,
  COALESCE("heartbeatSeconds", q.heartbeat_seconds) as heartbeat_seconds,
  COALESCE(blocked, false) as blocked,
  COALESCE(blocking, false) as blocking,
  COALESCE("pendingDependencies", 0) as pending_dependencies,
  "__traceContext" as trace_context
FROM (
  SELECT *,
    CASE
      WHEN (right("startAfter", 1) = 'Z' OR "startAfter" ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}') THEN CAST("startAfter" as timestamp with time zone)
      ELSE pgboss.job_now() + CAST(COALESCE("startAfter",'0') as interval)
      END as start_after
  FROM json_to_recordset('[{"id": null, "name": "bench", "data": {"n": 1}, "priority": 0, "singletonKey": null, "singletonOffset": 0, "groupId": null, "groupTier": null, "deadLetter": null, "__traceContext": null}]'::text::json) as x (
    id uuid,
    priority integer,
    data jsonb,
    "startAfter" text,
    "retryLimit" integer,
    "retryDelay" integer,
    "retryDelayMax" integer,
    "retryBackoff" boolean,
    "singletonKey" text,
    "singletonSeconds" integer,
    "singletonOffset" integer,
    "groupId" text,
    "groupTier" text,
    "expireInSeconds" integer,
    "deleteAfterSeconds" integer,
    "retentionSeconds" integer,
    "deadLetter" text,
    "heartbeatSeconds" integer,
    blocked boolean,
    blocking boolean,
    "pendingDependencies" integer,
    "__traceContext" jsonb
  )
) j
LEFT JOIN pgboss.queue q ON q.name = 'bench'
ON CONFLICT DO NOTHING
RETURNING id;
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
