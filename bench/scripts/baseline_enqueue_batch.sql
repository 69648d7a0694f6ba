-- The hand-written queue, 100 jobs per transaction.
INSERT INTO baseline_jobs (queue, payload) SELECT 'bench', '{"n": 1}' FROM generate_series(1, 100);
