-- The hand-written queue keeping finished jobs (bench/systems/baseline_hist.sh), steady state:
-- enqueue one, claim one, move it to the history (three transactions).
INSERT INTO baseline_hist_jobs (queue, payload) VALUES ('bench', '{"n": 1}');
UPDATE baseline_hist_jobs SET state = 'running', attempts = attempts + 1 WHERE id = (SELECT id FROM baseline_hist_jobs WHERE state = 'ready' AND queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id AS jid \gset
WITH done AS (DELETE FROM baseline_hist_jobs WHERE id = :jid RETURNING *) INSERT INTO baseline_hist_history SELECT id, queue, payload, priority, run_at, 'completed', attempts, now() FROM done;
