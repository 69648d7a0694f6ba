\set k random(1, 1000000000000)
SELECT jobq_enqueue('bench', '{"n": 1}', unique_key => 'u:' || :k, on_conflict => 'discard');
