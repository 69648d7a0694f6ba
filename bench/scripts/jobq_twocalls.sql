-- jobq, checkout of :batch jobs, then one call completing them all (jobq_complete_many): two
-- transactions per batch. With batch 1 the same work as jobq_checkout_complete.sql.
SELECT b.w AS w, (SELECT coalesce(array_agg(j.id), '{}') FROM jobq_checkout(b.w, ARRAY['bench'], :batch) j) AS ids FROM bench_workers b WHERE b.client = :client_id \gset
SELECT jobq_complete_many(:w::uuid, :ids::bigint[]);
