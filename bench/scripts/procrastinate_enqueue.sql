-- Procrastinate 3.10.0, one job per transaction: defer_jobs from procrastinate/sql/queries.sql with
-- the array literal psycopg sends for task 'bench' on queue 'bench' with kwargs {"n": 1}.
SELECT  unnest(
  procrastinate_defer_jobs_v1(
    '{"(bench,bench,0,,,\"{\"\"n\"\": 1}\",)"}'::procrastinate_job_to_defer_v1[]
  )
) AS id;
