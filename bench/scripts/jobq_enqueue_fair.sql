-- jobq, one job per transaction, each with one of 1,000 fairness keys: the cost of finding the
-- key's turns (its rows of jobq.fairness, made at the key's first job).
\set k random(1, 1000)
SELECT jobq_enqueue('bench', '{"n": 1}', fairness_key => 'tenant-' || :k);
