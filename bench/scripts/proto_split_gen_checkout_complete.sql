-- Layout prototype "split ready table, partitioned by generation" (bench/systems/proto_split_gen.sh):
-- as proto_split_indexed_checkout_complete.sql, the ready row named by (tableoid, ctid).
WITH r AS (DELETE FROM psg_ready WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM psg_ready WHERE queue = 'bench' AND run_at <= now() ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id) UPDATE psg_jobs j SET state = 'executing', worker_id = md5(:client_id::text)::uuid, attempt = j.attempt + 1, started_at = now() FROM r WHERE j.id = r.id RETURNING j.id AS jid \gset
UPDATE psg_jobs SET state = 'completed', finished_at = now(), result = NULL WHERE id = :jid AND state = 'executing' AND worker_id = md5(:client_id::text)::uuid;
