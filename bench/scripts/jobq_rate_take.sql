-- Two starts of rate key 'flip' in one transaction: what a checkout of two rate-limited jobs
-- takes (jobq._take_rate, src/sql/rate_limits.sql), without the jobs around it.
BEGIN;
SELECT jobq._take_rate('flip', clock_timestamp());
SELECT jobq._take_rate('flip', clock_timestamp());
COMMIT;
