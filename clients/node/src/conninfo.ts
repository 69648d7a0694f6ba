/**
 * Connection strings in both of libpq's forms. A `postgresql://` (or `postgres://`) URL goes
 * to `pg` as it is; anything else is read as a libpq keyword/value string
 * (`host=/var/run/postgresql dbname=app user=app`, as the Python and Rust libraries accept)
 * and turned into `pg`'s config object here, because `pg` itself would read it as a URL
 * relative to `postgres://base` and try for ever to reach a host called `base`.
 *
 * The syntax is libpq's ("Keyword/Value Connection Strings"): `keyword = value` pairs
 * separated by whitespace, spaces around `=` allowed, a value in single quotes when it is
 * empty or holds spaces, `\'` and `\\` for a quote and a backslash. A malformed string or
 * a keyword this library does not handle is refused at once with a
 * {@link ConnectionStringError}, never sent on to a connection attempt.
 *
 * ```ts
 * toClientConfig("host=/var/run/postgresql dbname=app user=app connect_timeout=5");
 * // { host: '/var/run/postgresql', database: 'app', user: 'app', connectionTimeoutMillis: 5000 }
 * toClientConfig('postgresql://app@db.example/app');
 * // { connectionString: 'postgresql://app@db.example/app' }
 * ```
 *
 * @packageDocumentation
 */
import { isIP } from 'node:net';

/** The `sslmode` values libpq knows. */
export type SslMode = 'disable' | 'allow' | 'prefer' | 'require' | 'verify-ca' | 'verify-full';

const SSL_MODES: readonly string[] = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'];

/**
 * The keywords {@link parseConninfo} turns into `pg` options: `host`, `hostaddr`, `port`,
 * `dbname`, `user`, `password`, `sslmode`, `application_name`, `options`,
 * `connect_timeout`.
 */
export const CONNINFO_KEYWORDS: readonly string[] = [
  'host', 'hostaddr', 'port', 'dbname', 'user', 'password', 'sslmode', 'application_name',
  'options', 'connect_timeout',
];

/** libpq keywords that this library does not map (refused as "not supported", not "unknown"). */
const LIBPQ_ONLY = new Set([
  'passfile', 'require_auth', 'channel_binding', 'client_encoding', 'fallback_application_name',
  'keepalives', 'keepalives_idle', 'keepalives_interval', 'keepalives_count', 'tcp_user_timeout',
  'replication', 'gssencmode', 'requiressl', 'sslnegotiation', 'sslcompression', 'sslcert', 'sslkey',
  'sslkeylogfile', 'sslpassword', 'sslcertmode', 'sslrootcert', 'sslcrl', 'sslcrldir', 'sslsni',
  'requirepeer', 'ssl_min_protocol_version', 'ssl_max_protocol_version', 'min_protocol_version',
  'max_protocol_version', 'krbsrvname', 'gsslib', 'gssdelegation', 'scram_client_key',
  'scram_server_key', 'service', 'target_session_attrs', 'load_balance_hosts', 'oauth_issuer',
  'oauth_client_id', 'oauth_client_secret', 'oauth_scope',
]);

const FORMS = 'jobq takes a postgresql:// URL ("postgresql://app@db.example:5432/app") or libpq '
  + 'key=value pairs ("host=/var/run/postgresql dbname=app user=app")';

/**
 * A connection string that cannot be used: malformed (an unterminated quote, a keyword
 * without `=`), an unknown or unsupported keyword, or a value out of its domain. Thrown
 * synchronously, before any connection is tried. The message names the problem (never a
 * value that could be a password) and the two forms accepted.
 */
export class ConnectionStringError extends Error {
  /** The problem alone, without the reminder of the accepted forms. */
  readonly problem: string;

  constructor(problem: string) {
    super(`jobq: invalid connection string: ${problem}. ${FORMS}`);
    this.name = 'ConnectionStringError';
    this.problem = problem;
  }
}

/**
 * The `pg` options a keyword/value connection string stands for (see {@link parseConninfo}).
 * Assignable to `pg.ClientConfig`; a keyword left out (or given an empty value) is absent,
 * so `pg` falls back to its environment variables (`PGHOST`, `PGUSER`, ...) and defaults,
 * as libpq does.
 */
export interface ConninfoConfig {
  /** `host`, or `hostaddr` when given (a directory starting with `/` is a Unix socket's). */
  host?: string;
  /** `port`. */
  port?: number;
  /** `dbname`. */
  database?: string;
  /** `user`. */
  user?: string;
  /** `password`. */
  password?: string;
  /**
   * From `sslmode`, as `pg-connection-string` maps it for URLs: `disable` is `false`; the
   * other modes are `{}`, TLS with the server's certificate verified (what `pg` does for
   * every mode but `disable`; `allow`, `prefer`, `require` and `verify-ca` are weaker in
   * libpq, so they emit a process warning once, as pg does for them in a URL). With both `host` and `hostaddr`, `servername` is `host`, so
   * the certificate is checked against the name, as libpq does.
   */
  ssl?: false | { servername?: string };
  /** `application_name`. */
  application_name?: string;
  /** `options`: command-line options sent to the server at connection start (`-c name=value`). */
  options?: string;
  /**
   * `connect_timeout` (seconds) in milliseconds, as libpq reads it: 0 or less waits for
   * ever (0 here), 1 is taken as 2 seconds.
   */
  connectionTimeoutMillis?: number;
}

/** Whether `s` is a `postgresql://` or `postgres://` URL (the scheme in any case). */
export function isConnectionUrl(s: string): boolean {
  return /^postgres(ql)?:\/\//i.test(s);
}

const isSpace = (c: string): boolean => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\v' || c === '\f';

/**
 * A keyword for an error message: shown if it is spelt like one, else only where it starts
 * (it could be a password given without its keyword).
 */
function quoted(word: string, at?: number): string {
  if (/^[A-Za-z_][A-Za-z0-9_]{0,39}$/.test(word)) return `"${word}"`;
  return at === undefined ? '(not shown: not spelt like a keyword)' : `the text at offset ${at}`;
}

/**
 * The keyword/value pairs of a libpq connection string, in order, by libpq's rules:
 * whitespace between pairs and around `=`; a value runs to the next whitespace, or is in
 * single quotes; in both, a backslash takes the next character literally (`\'`, `\\`).
 * Syntax only: keywords are not checked (see {@link parseConninfo}).
 *
 * @throws {@link ConnectionStringError} for a keyword without `=`, an `=` without a keyword,
 *   or an unterminated quoted value
 */
export function splitConninfo(conninfo: string): [keyword: string, value: string][] {
  const pairs: [string, string][] = [];
  const n = conninfo.length;
  let i = 0;
  while (i < n) {
    if (isSpace(conninfo[i]!)) {
      i += 1;
      continue;
    }
    const start = i;
    while (i < n && conninfo[i] !== '=' && !isSpace(conninfo[i]!)) i += 1;
    const keyword = conninfo.slice(start, i);
    while (i < n && isSpace(conninfo[i]!)) i += 1;
    if (conninfo[i] !== '=') throw new ConnectionStringError(`missing "=" after ${quoted(keyword, start)}`);
    if (keyword === '') throw new ConnectionStringError(`"=" without a keyword before it, at offset ${i}`);
    i += 1;
    while (i < n && isSpace(conninfo[i]!)) i += 1;
    let value = '';
    if (conninfo[i] === "'") {
      i += 1;
      for (;;) {
        if (i >= n) throw new ConnectionStringError(`unterminated quoted string in the value of ${quoted(keyword, start)}`);
        const c = conninfo[i]!;
        if (c === '\\') {
          if (i + 1 < n) value += conninfo[i + 1];
          i += 2;
        } else if (c === "'") {
          i += 1;
          break;
        } else {
          value += c;
          i += 1;
        }
      }
    } else {
      while (i < n && !isSpace(conninfo[i]!)) {
        if (conninfo[i] === '\\') {
          if (i + 1 < n) value += conninfo[i + 1];
          i += 2;
        } else {
          value += conninfo[i];
          i += 1;
        }
      }
    }
    pairs.push([keyword, value]);
  }
  return pairs;
}

let sslWarned = false;

/** Once per process, as pg-connection-string warns for these modes in a URL. */
function warnSslMode(mode: string): void {
  if (sslWarned) return;
  sslWarned = true;
  process.emitWarning(
    `jobq: sslmode=${mode} in a connection string is treated by pg as verify-full: TLS is required `
    + 'and the server certificate is verified against the host name (libpq would accept more). '
    + 'Write sslmode=verify-full to say so, or sslmode=disable for no TLS.');
}

function integer(keyword: string, value: string): number {
  const t = value.trim();
  if (!/^[+-]?\d+$/.test(t)) throw new ConnectionStringError(`invalid integer value "${value}" for ${keyword}`);
  return Number(t);
}

/**
 * A libpq keyword/value connection string as `pg`'s config object.
 *
 * | keyword | becomes |
 * | --- | --- |
 * | `host` | `host` (a directory starting with `/` is a Unix socket directory, as in libpq) |
 * | `hostaddr` | `host` (a numeric IPv4/IPv6 address, connected to instead of `host`) |
 * | `port` | `port` |
 * | `dbname` | `database` |
 * | `user`, `password`, `application_name`, `options` | the same names |
 * | `sslmode` | `ssl` (see {@link ConninfoConfig.ssl}) |
 * | `connect_timeout` (seconds) | `connectionTimeoutMillis` |
 *
 * A keyword given twice takes its last value, and an empty value counts as not given, as in
 * libpq. The empty string gives `{}` (everything from `pg`'s environment and defaults).
 *
 * @throws {@link ConnectionStringError} for malformed syntax, a keyword not in
 *   {@link CONNINFO_KEYWORDS} (unknown to libpq, or one this library does not map), several
 *   hosts or ports, an invalid `port`, `hostaddr`, `sslmode` or `connect_timeout`
 */
export function parseConninfo(conninfo: string): ConninfoConfig {
  const given = new Map<string, string>();
  for (const [keyword, value] of splitConninfo(conninfo)) {
    if (!CONNINFO_KEYWORDS.includes(keyword)) {
      if (LIBPQ_ONLY.has(keyword)) {
        throw new ConnectionStringError(
          `the libpq keyword "${keyword}" is not supported by jobq's Node library `
          + `(it takes ${CONNINFO_KEYWORDS.join(', ')}; for other options pass a URL or a pg.ClientConfig object)`);
      }
      throw new ConnectionStringError(`unknown keyword ${quoted(keyword)} (known: ${CONNINFO_KEYWORDS.join(', ')})`);
    }
    if (value === '') given.delete(keyword);
    else given.set(keyword, value);
  }
  const config: ConninfoConfig = {};
  const host = given.get('host');
  const hostaddr = given.get('hostaddr');
  for (const [keyword, value] of [['host', host], ['hostaddr', hostaddr], ['port', given.get('port')]] as const) {
    if (value !== undefined && value.includes(',')) {
      throw new ConnectionStringError(`several values in ${keyword} ("${value}"): pg connects to one host only`);
    }
  }
  if (hostaddr !== undefined) {
    if (isIP(hostaddr) === 0) throw new ConnectionStringError(`invalid hostaddr "${hostaddr}" (a numeric IPv4 or IPv6 address)`);
    config.host = hostaddr;
  } else if (host !== undefined) {
    config.host = host;
  }
  const port = given.get('port');
  if (port !== undefined) {
    const p = integer('port', port);
    if (p < 1 || p > 65535) throw new ConnectionStringError(`invalid port number "${port}"`);
    config.port = p;
  }
  const database = given.get('dbname');
  if (database !== undefined) config.database = database;
  const user = given.get('user');
  if (user !== undefined) config.user = user;
  const password = given.get('password');
  if (password !== undefined) config.password = password;
  const sslmode = given.get('sslmode');
  if (sslmode !== undefined) {
    if (!SSL_MODES.includes(sslmode)) {
      throw new ConnectionStringError(`invalid sslmode value "${sslmode}" (one of ${SSL_MODES.join(', ')})`);
    }
    if (sslmode === 'disable') {
      config.ssl = false;
    } else {
      if (sslmode !== 'verify-full') warnSslMode(sslmode);
      config.ssl = hostaddr !== undefined && host !== undefined && !host.startsWith('/') ? { servername: host } : {};
    }
  }
  const applicationName = given.get('application_name');
  if (applicationName !== undefined) config.application_name = applicationName;
  const options = given.get('options');
  if (options !== undefined) config.options = options;
  const timeout = given.get('connect_timeout');
  if (timeout !== undefined) {
    const s = integer('connect_timeout', timeout);
    config.connectionTimeoutMillis = s <= 0 ? 0 : Math.max(s, 2) * 1000;
  }
  return config;
}

/**
 * What to give `new pg.Client(...)` for a connection given as a string or a config object:
 * a URL as `{ connectionString }` (pg parses it), a keyword/value string parsed by
 * {@link parseConninfo}, and an object as it is, except that a keyword/value
 * `connectionString` in it is replaced by its parsed options (which win over the object's
 * own, as pg's do for a URL).
 *
 * @throws {@link ConnectionStringError} as {@link parseConninfo}
 */
export function toClientConfig(connection: string | { [option: string]: unknown }): { [option: string]: unknown } {
  if (typeof connection === 'string') {
    return isConnectionUrl(connection) ? { connectionString: connection } : { ...parseConninfo(connection) };
  }
  const cs = connection['connectionString'];
  if (typeof cs !== 'string' || isConnectionUrl(cs)) return connection;
  const rest = { ...connection };
  delete rest['connectionString'];
  return { ...rest, ...parseConninfo(cs) };
}
