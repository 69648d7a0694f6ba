-- jobq, the one-commit worker protocol: complete the jobs in hand and check out the next
-- :batch in one call and one transaction (jobq_complete_and_checkout). pgbench client c is the
-- worker of row c of bench_workers; :ids (started as '{}' with -D) carries the jobs in hand.
SELECT coalesce(array_agg(j.id), '{}') AS ids FROM bench_workers b, LATERAL jobq_complete_and_checkout(b.w, :ids::bigint[], NULL, ARRAY['bench'], :batch) j WHERE b.client = :client_id \gset
