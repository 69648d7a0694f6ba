#!/usr/bin/env node
// Enqueue jobs from Node.js (pg): one jobq_enqueue call per job, ids on stdout.
//
//   JOBQ_DSN=... node examples/node/enqueue.js QUEUE COUNT ['{"sleep_ms": 20}']
//
// Each job's payload is the given JSON object plus {"n": <index>}.
'use strict';
const { Client } = require('pg');

async function main() {
  const [queue, count, extra] = process.argv.slice(2);
  const payload = extra ? JSON.parse(extra) : {};
  const db = new Client({ connectionString: process.env.JOBQ_DSN || 'postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo' });
  await db.connect();
  for (let n = 0; n < Number(count); n++) {
    const { rows } = await db.query('SELECT jobq_enqueue($1, $2) AS id', [queue, { ...payload, n }]);
    process.stdout.write(rows[0].id + '\n');
  }
  await db.end();
}
main().catch((e) => { console.error(e); process.exit(1); });
