-- jobq, one job per transaction, each with its own unique key (until_executed): the cost of
-- the key's row in jobq.locks.
\set k random(1, 1000000000000)
SELECT jobq_enqueue('bench', '{"n": 1}', unique_key => 'u:' || :k, on_conflict => 'discard');
