-- Layout prototype "live table + history" (bench/systems/proto_live.sh): claim = set the worker
-- in place; complete = move the row to the history, fenced by the worker.
UPDATE pl_live SET worker_id = md5(:client_id::text)::uuid, attempt = attempt + 1, started_at = now() WHERE id = (SELECT id FROM pl_live WHERE queue = 'bench' AND worker_id IS NULL AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id AS jid \gset
WITH d AS (DELETE FROM pl_live WHERE id = :jid AND worker_id = md5(:client_id::text)::uuid RETURNING *) INSERT INTO pl_history SELECT id, queue, payload, attempt, worker_id, started_at, now(), 'completed', NULL FROM d;
