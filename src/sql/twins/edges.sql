-- Twins of src/edges.rs. The extension notes in shared memory which databases have workflow
-- edges, and under REPEATABLE READ or SERIALIZABLE reads jobq.edges in the newest snapshot to
-- refuse (40001) a completion that cannot see a dependent enqueued after its snapshot. SQL
-- cannot read another snapshot: here such a completion notes its jobs, and the next reap pass,
-- under READ COMMITTED, tells the dependents it could not see (jobq._settle is idempotent:
-- it settles only the edges not yet settled).
CREATE TABLE jobq.settle_later (job_id bigint PRIMARY KEY);

CREATE FUNCTION jobq._note_edges() RETURNS void
LANGUAGE sql VOLATILE AS $$ SELECT NULL::void $$;

CREATE FUNCTION jobq._refuse_unseen_edges(parents bigint[]) RETURNS void
LANGUAGE plpgsql STRICT VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO jobq.settle_later SELECT DISTINCT p FROM unnest(parents) p ON CONFLICT DO NOTHING;
    END IF;
END $$;

CREATE FUNCTION jobq._settle_unseen() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_ids    bigint[];
    v_states text[];
BEGIN
    WITH taken AS (
        DELETE FROM jobq.settle_later s
         WHERE s.job_id = ANY (ARRAY(SELECT t.job_id FROM jobq.settle_later t ORDER BY t.job_id FOR UPDATE SKIP LOCKED))
        RETURNING s.job_id
    )
    SELECT array_agg(f.id ORDER BY f.id), array_agg(f.state ORDER BY f.id) INTO v_ids, v_states
      FROM taken t JOIN jobq.finished_jobs f ON f.id = t.job_id;
    PERFORM jobq._settle(v_ids, v_states);
END $$;
