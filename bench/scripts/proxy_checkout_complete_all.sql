-- jobq through jobq_proxy (bench/proxy.sh): a worker's checkout of any queue (the proxy asks the
-- nodes in turn from a random one), then complete, two transactions per job.
SELECT j.id AS jid, b.w AS w FROM bench_workers b, LATERAL jobq_checkout(b.w) j WHERE b.client = :client_id \gset
SELECT jobq_complete(:jid, :w);
