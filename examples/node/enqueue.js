#!/usr/bin/env node
// Enqueue jobs from Node.js with the `jobq` library (clients/node), ids on stdout.
//
//   JOBQ_DSN=... node examples/node/enqueue.js QUEUE COUNT ['{"sleep_ms": 20}']
//
// Each job's payload is the given JSON object plus {"n": <index>}; all of them commit together.
'use strict';
const { Client } = require('pg');
const { enqueue } = require('jobq');

async function main() {
  const [queue, count, extra] = process.argv.slice(2);
  const payload = extra ? JSON.parse(extra) : {};
  const db = new Client({ connectionString: process.env.JOBQ_DSN || 'postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo' });
  await db.connect();
  try {
    await db.query('BEGIN');
    const ids = [];
    for (let n = 0; n < Number(count); n++) ids.push(await enqueue(db, queue, { ...payload, n }));
    await db.query('COMMIT');
    for (const id of ids) process.stdout.write(id + '\n');
  } finally {
    await db.end();
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
