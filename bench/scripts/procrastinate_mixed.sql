-- Procrastinate 3.10.0, steady state: defer one job, then fetch one and finish it (three
-- transactions). SQL as in procrastinate_enqueue.sql and procrastinate_checkout_complete.sql.
\set w :client_id + 1
SELECT  unnest(
  procrastinate_defer_jobs_v1(
    '{"(bench,bench,0,,,\"{\"\"n\"\": 1}\",)"}'::procrastinate_job_to_defer_v1[]
  )
) AS id;
SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, queue_name, attempts, worker_id
    FROM procrastinate_fetch_job_v2('{bench}'::varchar[], :w) \gset p_
SELECT procrastinate_finish_job_v1(:p_id, 'succeeded', false);
