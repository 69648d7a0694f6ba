-- The look that the fast paths of jobq_checkout and jobq_complete_and_checkout start with, pasted
-- by scripts/build-sql-edition.py where a twin's body says `@paste look_one@` (this header left
-- out): one statement reads the worker's row and looks at the tables that send a call to the
-- general path, once for both steps of a worker's call. Read apart, by the completion's DELETE
-- and the checkout's condition, they cost each job 40,000 instructions more (row jobq_sql_worker,
-- 812,663 at 803ea29 against 772,917 at df75f5a): the worker's row read twice,
-- jobq.queue_grants looked at twice. Under READ COMMITTED only, the fast paths' level: under
-- any other the variables stay NULL and every step is the general path's. It sets
--   v_mine       the worker is the caller's own (its role, no role set);
--   v_ungranted  no queue grant limits any role;
--   v_live       the worker is not stopping and its heartbeat is fresh;
--   v_pid, v_start  the session it is bound to (NULL: unbound);
--   v_plain      no pause, and no queue of `queues` takes turns (fair checkout), or none at all
--                where `queues` is NULL. (Two looks, as jobq._checkout's: one condition for
--                both would read every key's row.)
-- An unknown worker: all NULL, and the general paths decide. The bodies declare these six and
-- name the worker `worker` and the checkout's queues `queues`.
IF current_setting('transaction_isolation') = 'read committed' THEN
    SELECT w.owner::oid = jobq._caller() AND pg_catalog.current_setting('role') = 'none',
           NOT EXISTS (SELECT 1 FROM jobq.queue_grants),
           w.stopping_at IS NULL AND w.heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s'),
           w.backend_pid, w.backend_start,
           NOT EXISTS (SELECT 1 FROM jobq.pauses)
           AND NOT (CASE WHEN queues IS NULL THEN EXISTS (SELECT 1 FROM jobq.fairness_keys)
                         ELSE EXISTS (SELECT 1 FROM jobq.fairness_keys f WHERE f.queue = ANY (queues)) END)
      INTO v_mine, v_ungranted, v_live, v_pid, v_start, v_plain
      FROM jobq.workers w WHERE w.id = worker;
END IF;
