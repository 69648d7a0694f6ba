-- Procrastinate 3.10.0, a worker's fetch then finish, two transactions per job. The SQL is that of
-- procrastinate/sql/queries.sql (fetch_job, finish_job) in the PyPI package, as the worker
-- (procrastinate/worker.py) sends it; procrastinate_fetch_job_v2 and procrastinate_finish_job_v1
-- come from procrastinate/sql/schema.sql. Finish is 'succeeded' with delete_job false: the
-- worker's default, DeleteJobCondition.NEVER, keeps finished jobs. Worker id = client id + 1.
\set w :client_id + 1
SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, queue_name, attempts, worker_id
    FROM procrastinate_fetch_job_v2('{bench}'::varchar[], :w) \gset p_
SELECT procrastinate_finish_job_v1(:p_id, 'succeeded', false);
