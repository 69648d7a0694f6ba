-- A change of rate key 'flip''s limit, between 40 and 60 starts per 20 ms.
\set n random(40, 60)
SELECT jobq_set_rate_limit('flip', :n, '20 ms');
