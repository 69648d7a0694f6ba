-- jobq through jobq_proxy (bench/proxy.sh), or directly on a node: a worker's checkout of queue
-- q<client % nodes> (pinned to node client % nodes), then complete, two transactions per job.
\set q :client_id % :nodes
SELECT j.id AS jid, b.w AS w FROM bench_workers b, LATERAL jobq_checkout(b.w, ARRAY['q' || :q::text]) j WHERE b.client = :client_id \gset
SELECT jobq_complete(:jid, :w);
