-- Layout prototype "split ready table + jobq's partial indexes"
-- (bench/systems/proto_split_indexed.sh): as proto_split_checkout_complete.sql.
WITH r AS (DELETE FROM psi_ready WHERE ctid = (SELECT ctid FROM psi_ready WHERE queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id) UPDATE psi_jobs j SET state = 'executing', worker_id = md5(:client_id::text)::uuid, attempt = j.attempt + 1, started_at = now() FROM r WHERE j.id = r.id RETURNING j.id AS jid \gset
UPDATE psi_jobs SET state = 'completed', finished_at = now(), result = NULL WHERE id = :jid AND state = 'executing' AND worker_id = md5(:client_id::text)::uuid;
