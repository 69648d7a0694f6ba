-- jobq, the one-commit worker protocol: complete the jobs in hand and check out the next
-- :batch in one call and one transaction (jobq_complete_and_checkout). pgbench client c is the
-- worker bench_worker(c) (bench/lib.sh); :ids (started as '{}' with -D) carries the jobs in hand.
SELECT coalesce(array_agg(j.id), '{}') AS ids FROM jobq_complete_and_checkout(bench_worker(:client_id), :ids::bigint[], NULL, ARRAY['bench'], :batch) j \gset
