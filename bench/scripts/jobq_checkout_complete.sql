-- jobq, a worker's checkout then complete, two transactions per job (pgbench client c is the
-- registered worker bench_worker(c), bench/lib.sh).
SELECT j.id AS jid FROM jobq_checkout(bench_worker(:client_id), ARRAY['bench']) j \gset
SELECT jobq_complete(:jid, bench_worker(:client_id));
