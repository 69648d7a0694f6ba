-- jobq, one job per transaction.
SELECT jobq_enqueue('bench', '{"n": 1}');
