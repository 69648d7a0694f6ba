-- jobq, 100 jobs per transaction through jobq_enqueue_batch (the array built server-side, as
-- in the peers' batch scripts).
SELECT count(*) FROM jobq_enqueue_batch('bench', ARRAY(SELECT '{"n": 1}'::jsonb FROM generate_series(1, 100)));
