-- Procrastinate 3.10.0, 100 jobs per transaction through its batch path, defer_jobs from
-- procrastinate/sql/queries.sql (what Task.batch_defer sends), the array
-- built server-side instead of sent as a 100-element literal.
SELECT  unnest(
  procrastinate_defer_jobs_v1(
    ARRAY(SELECT ROW('bench', 'bench', 0, NULL, NULL, '{"n": 1}', NULL)::procrastinate_job_to_defer_v1
          FROM generate_series(1, 100))
  )
) AS id;
