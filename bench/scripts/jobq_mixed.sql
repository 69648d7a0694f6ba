-- jobq, steady state: enqueue one job, then check one out and complete it (three transactions;
-- pgbench client c is the registered worker bench_worker(c), bench/lib.sh).
SELECT jobq_enqueue('bench', '{"n": 1}');
SELECT j.id AS jid FROM jobq_checkout(bench_worker(:client_id), ARRAY['bench']) j \gset
SELECT jobq_complete(:jid, bench_worker(:client_id));
