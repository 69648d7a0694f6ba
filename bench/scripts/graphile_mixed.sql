-- Graphile Worker 0.18.0, steady state: add one job, then fetch one and complete it (three
-- transactions). SQL as in graphile_enqueue.sql and graphile_checkout_complete.sql.
select * from "graphile_worker".add_job(
  identifier => 'bench'::text,
  payload => '{"n": 1}'::json,
  queue_name => null::text,
  run_at => null::timestamptz,
  max_attempts => null::int,
  job_key => null::text,
  priority => null::int,
  flags => null::text[],
  job_key_mode => null::text
);
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
