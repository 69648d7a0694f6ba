-- The hand-written queue, one job per transaction (no NOTIFY: it has no waiting workers).
INSERT INTO baseline_jobs (queue, payload) VALUES ('bench', '{"n": 1}');
