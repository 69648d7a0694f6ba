-- jobq, a worker's checkout then complete, two transactions per job (pgbench client c is the
-- registered worker of row c of bench_workers).
SELECT j.id AS jid, b.w AS w FROM bench_workers b, LATERAL jobq_checkout(b.w, ARRAY['bench']) j WHERE b.client = :client_id \gset
SELECT jobq_complete(:jid, :w);
