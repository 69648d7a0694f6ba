-- Graphile Worker 0.18.0, a worker's fetch then complete, two transactions per job. The SQL is the
-- worker's default path (no localQueue, completeJobBatchDelay off) from the npm package:
-- get_job from dist/sql/getJobs.js (batchGetJobs, batch size 1, named-queue strategy 2) and
-- complete_job from dist/sql/completeJobs.js (a job without queue_name is deleted); checked against
-- the statements a real `graphile-worker --once` logged. Parameters written in: $1, the worker
-- pool id, is 'pool-bench-<client id>'; $2, the task ids, is '{1}' (task 'bench', see graphile_reset).
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
    limit 1
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
)
  update "graphile_worker"._private_jobs as jobs
    set
      attempts = jobs.attempts + 1,
      locked_by = ('pool-bench-' || :client_id)::text,
      locked_at = now()
    from j
    where jobs.id = j.id
    returning * \gset g_
delete from "graphile_worker"._private_jobs as jobs
where id = :g_id::bigint;
