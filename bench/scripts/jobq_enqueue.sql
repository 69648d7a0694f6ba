SELECT jobq_enqueue('bench', '{"n": 1}');
