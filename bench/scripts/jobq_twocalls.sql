-- jobq, checkout of :batch jobs, then one call completing them all (jobq_complete_many): two
-- transactions per batch. With batch 1 the same work as jobq_checkout_complete.sql. pgbench
-- client c is the worker bench_worker(c) (bench/lib.sh).
SELECT coalesce(array_agg(j.id), '{}') AS ids FROM jobq_checkout(bench_worker(:client_id), ARRAY['bench'], :batch) j \gset
SELECT jobq_complete_many(bench_worker(:client_id), :ids::bigint[]);
