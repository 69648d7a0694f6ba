-- Graphile Worker 0.18.0, 100 jobs per transaction through its batch function add_jobs, as
-- makeAddJobs in dist/helpers.js (WorkerUtils.addJobs) calls it; the job_spec array is built
-- server-side instead of from json_populate_recordset over a 100-element JSON parameter.
select *
from "graphile_worker".add_jobs(
  array(
    select ('bench', '{"n": 1}', null, null, null, null, null, null)::"graphile_worker".job_spec
    from generate_series(1, 100)
  ),
  false
);
