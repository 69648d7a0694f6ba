-- Scale-out (the contract, "Scale-out: several servers behind PL/Proxy"): each node's job ids name
-- the node that made them, id % 1024 = node, so that a proxy routes a call about a job id to
-- the node that holds the job. The id sequence counts in steps of 1,024 from 1,024 + node.

CREATE FUNCTION jobq_set_node(node integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF node IS NULL THEN
        RAISE EXCEPTION 'jobq: node must not be NULL' USING ERRCODE = '22004';
    ELSIF node < 0 OR node >= 1024 THEN
        RAISE EXCEPTION 'jobq: node must be between 0 and 1023, got %', node USING ERRCODE = '22023';
    END IF;
    -- ALTER SEQUENCE locks the sequence against nextval until this transaction ends, so no id
    -- can be drawn between the check and the restart.
    ALTER SEQUENCE jobq.jobs_id_seq INCREMENT BY 1024;
    IF (SELECT s.is_called FROM jobq.jobs_id_seq s) THEN
        RAISE EXCEPTION 'jobq: this node has already made a job id; its node can only be set before the first'
            USING ERRCODE = '55000',
                  HINT = 'Set the node right after CREATE EXTENSION jobq, before anything is enqueued.';
    END IF;
    EXECUTE format('ALTER SEQUENCE jobq.jobs_id_seq RESTART WITH %s', 1024 + node);
END $$;
