-- Graphile Worker 0.18.0 in its batched modes: get_job with a batch size (batchGetJobs, as with
-- getJobBatchSize / localQueue) then completeJobs for the whole batch (completeJobBatchDelay):
-- the statements of graphile_checkout_complete.sql with `limit :batch` and `id = any(...)`;
-- two transactions per batch.
with j as (
  select jobs.job_queue_id, jobs.priority, jobs.run_at, jobs.id
    from "graphile_worker"._private_jobs as jobs
    where jobs.is_available = true
    and run_at <= now()
    and task_id = any('{1}'::int[])
    and (
      jobs.job_queue_id is null
      or
      jobs.job_queue_id in (
        select id
        from "graphile_worker"._private_job_queues as job_queues
        where job_queues.is_available = true
        for update
        skip locked
      )
    )
    order by priority asc, run_at asc
    limit :batch
    for update
    skip locked
),
q as (
  update "graphile_worker"._private_job_queues as job_queues
    set
      locked_by = ('pool-bench-' || :client_id)::text,
      locked_at = now()
    from j
    where job_queues.id = j.job_queue_id
),
u as (
  update "graphile_worker"._private_jobs as jobs
    set
      attempts = jobs.attempts + 1,
      locked_by = ('pool-bench-' || :client_id)::text,
      locked_at = now()
    from j
    where jobs.id = j.id
    returning jobs.id
)
select coalesce(array_agg(u.id), '{}') as g_ids from u \gset
delete from "graphile_worker"._private_jobs as jobs
where id = any(:g_ids::bigint[]);
