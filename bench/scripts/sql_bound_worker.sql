-- The SQL edition as the client libraries' workers run it (bench/bound.sh): a worker bound to
-- this pgbench connection's session, registered by its first transaction (its id then kept in
-- a session setting: this first statement runs every transaction, on both sides of the A/B),
-- and one call a job, jobq_complete_and_checkout with the job in hand (:ids, '{}' at first).
SELECT coalesce(nullif(current_setting('bench.w', true), ''),
                set_config('bench.w', jobq_register_worker('bench', bind_to_session => true)::text, false)) AS w \gset
SELECT coalesce(array_agg(j.id), '{}') AS ids FROM jobq_complete_and_checkout(:w::uuid, :ids::bigint[], NULL, ARRAY['bench'], 1) j \gset
