-- The hand-written queue, steady state: enqueue one, claim one, delete it (three transactions).
INSERT INTO baseline_jobs (queue, payload) VALUES ('bench', '{"n": 1}');
UPDATE baseline_jobs SET state = 'running', attempts = attempts + 1 WHERE id = (SELECT id FROM baseline_jobs WHERE state = 'ready' AND queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id AS jid \gset
DELETE FROM baseline_jobs WHERE id = :jid;
