-- The hand-written queue, one job per transaction, with the NOTIFY that wakes a LISTENing
-- worker (what jobq_enqueue and the peers' enqueue triggers send).
BEGIN;
INSERT INTO baseline_jobs (queue, payload) VALUES ('bench', '{"n": 1}');
NOTIFY baseline, 'bench';
COMMIT;
