// Connection strings in libpq's key=value form (src/conninfo.ts): the parser, its mapping to
// pg's options, its refusals, and the Worker refusing a malformed string at once. Needs no
// server: run alone with `npm run build && npm run build:test && node --test dist-test/conninfo.test.js`.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as os from 'node:os';
import * as path from 'node:path';
import { createRequire } from 'node:module';
import * as jobq from 'jobq';

/** pg's own URL parser (pg-connection-string), resolved from pg: the one pg uses. */
const parseUrl = (createRequire(require.resolve('pg'))('pg-connection-string') as {
  parse(url: string): { ssl?: unknown };
}).parse;

const { parseConninfo, splitConninfo, toClientConfig, ConnectionStringError } = jobq;

/** The ConnectionStringError `f` throws, synchronously; its message must name both forms. */
function refusal(f: () => unknown, problem: RegExp): InstanceType<typeof ConnectionStringError> {
  let error: unknown;
  try {
    f();
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof ConnectionStringError, `expected a ConnectionStringError, got ${String(error)}`);
  assert.match(error.problem, problem);
  assert.match(error.message, /postgresql:\/\/ URL/);
  assert.match(error.message, /libpq key=value pairs/);
  return error;
}

test('the libpq form becomes pg options', () => {
  assert.deepEqual(parseConninfo('host=/var/run/postgresql dbname=app user=app'), {
    host: '/var/run/postgresql', database: 'app', user: 'app',
  });
  assert.deepEqual(
    parseConninfo("host=db.example port=6432 dbname=app user=worker password=pw application_name=mail-worker options='-c statement_timeout=5s' connect_timeout=7"),
    {
      host: 'db.example', port: 6432, database: 'app', user: 'worker', password: 'pw',
      application_name: 'mail-worker', options: '-c statement_timeout=5s', connectionTimeoutMillis: 7000,
    },
  );
  assert.deepEqual(parseConninfo(''), {});
  assert.deepEqual(parseConninfo('   \t\n '), {});
});

test('the syntax is libpq\'s: spaces around =, quotes, backslash escapes, the last value wins', () => {
  assert.deepEqual(splitConninfo(" host = /tmp\tdbname=\n'my db'  user =app "), [['host', '/tmp'], ['dbname', 'my db'], ['user', 'app']]);
  assert.deepEqual(splitConninfo(String.raw`password='it\'s a \\ secret'`), [['password', "it's a \\ secret"]]);
  assert.deepEqual(splitConninfo(String.raw`password=a\ b\'c\\d`), [['password', "a b'c\\d"]]);
  assert.deepEqual(splitConninfo("a='x'b=y"), [['a', 'x'], ['b', 'y']], 'no space needed after a quoted value');
  assert.deepEqual(splitConninfo("a='' b="), [['a', ''], ['b', '']]);
  assert.deepEqual(parseConninfo('user=a user=b'), { user: 'b' });
  assert.deepEqual(parseConninfo("user=a password='' host="), { user: 'a' }, 'an empty value counts as not given');
});

test('hostaddr is connected to; with host, TLS checks the name', () => {
  assert.deepEqual(parseConninfo('hostaddr=10.0.0.5'), { host: '10.0.0.5' });
  assert.deepEqual(parseConninfo('hostaddr=::1 port=5433'), { host: '::1', port: 5433 });
  assert.deepEqual(parseConninfo('host=db.example hostaddr=10.0.0.5 sslmode=verify-full'), {
    host: '10.0.0.5', ssl: { servername: 'db.example' },
  });
});

test('sslmode maps to ssl as pg-connection-string maps it for a URL', () => {
  for (const mode of ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full']) {
    const fromUrl = parseUrl(`postgresql://db.example/app?sslmode=${mode}`).ssl;
    assert.deepEqual(parseConninfo(`host=db.example dbname=app sslmode=${mode}`).ssl, fromUrl, mode);
  }
  assert.equal(parseConninfo('sslmode=disable').ssl, false);
  assert.deepEqual(parseConninfo('sslmode=require').ssl, {});
  assert.equal('ssl' in parseConninfo('host=x'), false, 'no sslmode: pg decides (PGSSLMODE)');
});

test('connect_timeout is seconds, read as libpq reads it', () => {
  assert.equal(parseConninfo('connect_timeout=10').connectionTimeoutMillis, 10_000);
  assert.equal(parseConninfo('connect_timeout=1').connectionTimeoutMillis, 2_000, 'libpq\'s minimum is 2 s');
  assert.equal(parseConninfo('connect_timeout=0').connectionTimeoutMillis, 0, 'no timeout');
  assert.equal(parseConninfo('connect_timeout=-3').connectionTimeoutMillis, 0, 'no timeout');
});

test('URLs go to pg as they are; objects keep their options', () => {
  assert.equal(jobq.isConnectionUrl('postgresql://app@db/app'), true);
  assert.equal(jobq.isConnectionUrl('postgres://app@db/app'), true);
  assert.equal(jobq.isConnectionUrl('host=db'), false);
  assert.deepEqual(toClientConfig('postgresql://app@db/app?sslmode=disable'), { connectionString: 'postgresql://app@db/app?sslmode=disable' });
  assert.deepEqual(toClientConfig('postgres:///app?host=/var/run/postgresql'), { connectionString: 'postgres:///app?host=/var/run/postgresql' });
  assert.deepEqual(toClientConfig('host=/tmp dbname=app'), { host: '/tmp', database: 'app' });
  const object = { connectionString: 'postgresql://db/app', max: 3 };
  assert.equal(toClientConfig(object), object);
  assert.deepEqual(toClientConfig({ host: 'x', user: 'me' }), { host: 'x', user: 'me' });
  assert.deepEqual(toClientConfig({ connectionString: 'host=/tmp dbname=app', database: 'other', keepAlive: true }), {
    host: '/tmp', database: 'app', keepAlive: true,
  });
});

test('malformed strings are refused, naming the problem', () => {
  refusal(() => parseConninfo('host=/tmp dbname'), /missing "=" after "dbname"/);
  refusal(() => parseConninfo('app'), /missing "=" after "app"/);
  refusal(() => parseConninfo('host=/tmp =app'), /"=" without a keyword/);
  refusal(() => parseConninfo("host=/tmp password='abc"), /unterminated quoted string in the value of "password"/);
  refusal(() => parseConninfo(String.raw`password='abc\'`), /unterminated quoted string/);
  refusal(() => parseConninfo('Server=db;Database=app'), /unknown keyword "Server"/);
  refusal(() => parseConninfo('hots=db'), /unknown keyword "hots" \(known: host, hostaddr, port, dbname, user, password, sslmode, application_name, options, connect_timeout\)/);
  refusal(() => parseConninfo('host=db sslrootcert=/etc/ca.pem'), /libpq keyword "sslrootcert" is not supported/);
  refusal(() => parseConninfo('sslmode=no-verify'), /invalid sslmode value "no-verify"/);
  refusal(() => parseConninfo('port=abc'), /invalid integer value "abc" for port/);
  refusal(() => parseConninfo('port=70000'), /invalid port number/);
  refusal(() => parseConninfo('connect_timeout=1.5'), /invalid integer value "1.5" for connect_timeout/);
  refusal(() => parseConninfo('hostaddr=db.example'), /invalid hostaddr/);
  refusal(() => parseConninfo('host=a,b'), /several values in host/);
  refusal(() => toClientConfig('dbname=app user'), /missing "="/);
  refusal(() => toClientConfig({ connectionString: 'dbname=app user' }), /missing "="/);
});

test('a refusal never shows a password', () => {
  const e1 = refusal(() => parseConninfo("user=app password='hunter2 host=db"), /unterminated/);
  assert.doesNotMatch(e1.message, /hunter2/);
  const e2 = refusal(() => parseConninfo('user=app s3cr3t!pw'), /missing "=" after the text at offset 9/);
  assert.doesNotMatch(e2.message, /s3cr3t/);
  const e3 = refusal(() => parseConninfo('user=app s3cr3t!pw=x'), /unknown keyword \(not shown/);
  assert.doesNotMatch(e3.message, /s3cr3t/);
});

test('a Worker given a malformed string throws at once, before any connection', () => {
  const events: jobq.WorkerEvent[] = [];
  const make = (dsn: string) => () => new jobq.Worker(dsn, { handleSignals: false, log: (e) => events.push(e) });
  refusal(make('host=/var/run/postgresql dbname=app user'), /missing "=" after "user"/);
  refusal(make("host=/var/run/postgresql password='x"), /unterminated quoted string/);
  refusal(make('host=/var/run/postgresql database=app'), /unknown keyword "database"/);
  refusal(() => new jobq.Worker({ connectionString: 'dbname=app bogus=1' }), /unknown keyword "bogus"/);
  assert.deepEqual(events, [], 'nothing ran');
  // Well-formed strings of both forms construct (no connection is made before run()).
  new jobq.Worker('host=/var/run/postgresql dbname=app user=app', { handleSignals: false });
  new jobq.Worker('postgresql://app@localhost/app', { handleSignals: false });
});

test('a Worker given the key=value form connects where it says (a Unix socket directory and port)', async () => {
  const dir = path.join(os.tmpdir(), `jobq-no-such-dir-${process.pid}`);
  const events: jobq.WorkerEvent[] = [];
  let seen!: (e: jobq.WorkerEvent) => void;
  const disconnected = new Promise<jobq.WorkerEvent>((resolve) => { seen = resolve; });
  const worker = new jobq.Worker(`host=${dir} port=6543 dbname=app user=app connect_timeout=2`, {
    handleSignals: false,
    log: (e) => {
      events.push(e);
      if (e.event === 'disconnected') seen(e);
    },
  });
  const running = worker.run();
  const e = await disconnected;
  await worker.stop();
  await running;
  // pg tried the socket file in that directory, not a host called "base".
  assert.match(String(e['error']), new RegExp(`${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/\\.s\\.PGSQL\\.6543`));
  assert.doesNotMatch(String(e['error']), /ENOTFOUND/);
});
