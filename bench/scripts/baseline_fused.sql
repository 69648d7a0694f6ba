-- The hand-written queue with one statement per job: delete the job in hand (:jid, started as
-- 0 with -D) and claim the next, in one transaction. Always one row back (0: nothing claimed).
WITH done AS (DELETE FROM baseline_jobs WHERE id = :jid), claimed AS (UPDATE baseline_jobs SET state = 'running', attempts = attempts + 1 WHERE id = (SELECT id FROM baseline_jobs WHERE state = 'ready' AND queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id) SELECT coalesce(max(id), 0) AS jid FROM claimed \gset
