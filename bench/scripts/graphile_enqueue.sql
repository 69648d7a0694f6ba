-- Graphile Worker 0.18.0, one job per transaction: the add_job call of makeAddJob in
-- dist/helpers.js (WorkerUtils.addJob / the quickAddJob path), task 'bench', payload {"n": 1}.
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
