-- jobq, steady state: enqueue one job, then check one out and complete it (three transactions).
SELECT jobq_enqueue('bench', '{"n": 1}');
SELECT j.id AS jid, b.w AS w FROM bench_workers b, LATERAL jobq_checkout(b.w, ARRAY['bench']) j WHERE b.client = :client_id \gset
SELECT jobq_complete(:jid, :w);
