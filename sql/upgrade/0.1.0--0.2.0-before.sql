-- Before 0.2.0's install script: 0.1.0's objects step aside. Its functions outside schema
-- jobq (the jobq_* API in the extension's schema) are dropped, since 0.2.0 creates them anew,
-- some with other signatures; schema jobq, with its tables and their rows, is renamed
-- jobq_0_1_0, from where the part after the install script copies the rows into 0.2.0's
-- tables and then drops it.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
                                     AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'jobq'
         WHERE p.pronamespace <> 'jobq'::regnamespace
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END $$;
ALTER SCHEMA jobq RENAME TO jobq_0_1_0;
