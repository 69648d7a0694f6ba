SELECT jobq_reap();
