SELECT j.id AS jid, b.w AS w FROM bench_workers b, LATERAL jobq_checkout(b.w, ARRAY['bench']) j WHERE b.client = :client_id \gset
SELECT jobq_complete(:jid, :w);
