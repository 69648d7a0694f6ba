-- Layout prototype "split ready table" (bench/systems/proto_split.sh): claim = delete the ready
-- row and update the job row in place; complete = update it in place, fenced by state and worker.
WITH r AS (DELETE FROM ps_ready WHERE ctid = (SELECT ctid FROM ps_ready WHERE queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id) UPDATE ps_jobs j SET state = 'executing', worker_id = md5(:client_id::text)::uuid, attempt = j.attempt + 1, started_at = now() FROM r WHERE j.id = r.id RETURNING j.id AS jid \gset
UPDATE ps_jobs SET state = 'completed', finished_at = now(), result = NULL WHERE id = :jid AND state = 'executing' AND worker_id = md5(:client_id::text)::uuid;
