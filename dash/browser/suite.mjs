// jobq-dash in headless Chromium, as a person uses it: every page, a chart drawn, the jobs
// filter, an admin's retry, a reader's missing actions and a forged action refused.
//
// Run by dash/tests/browser.rs, which seeds a database, starts two dashboards (one connected as
// a jobq_admin role, one as a jobq_reader role) and passes JOBQ_DASH_BROWSER_FIXTURE (JSON):
//   admin, reader          the dashboards' base URLs
//   deadRetried            a dead job of `queue` the admin retries
//   deadForged             a dead job of `queue` the reader tries to retry with a forged POST
//   queues, queue, kind    the queues with activity; the queue and kind of the dead jobs
//   worker, lock, schedule, rateLimit   names the other pages must show
//   screenshot             where to save the admin's overview (PNG)
//   long                   a third dashboard (url, as a jobq_admin role) of a database whose every
//                          name is 900 bytes long: names (queue, kind, unique, concurrency, rate,
//                          lock, schedule, worker) and job (its executing job, holding the keys)
// Prints one line per check; exits 0 when all pass, 1 at the first failure.
//
// Chromium is Debian's (/usr/bin/chromium); playwright-core only drives it (never run
// `npx playwright install`).

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CHROMIUM = process.env.JOBQ_DASH_CHROMIUM || '/usr/bin/chromium';
// Without the background-networking flags Chromium's own outgoing connections are refused
// many at a time on the test machines.
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

const fx = JSON.parse(process.env.JOBQ_DASH_BROWSER_FIXTURE || 'null');
if (!fx) {
  console.error('JOBQ_DASH_BROWSER_FIXTURE is not set: run this suite through `cargo test -p jobq-dash --test browser`');
  process.exit(1);
}

class Failure extends Error {}
let checks = 0;
function check(cond, what, detail = '') {
  if (!cond) throw new Failure(`FAIL - ${what}${detail ? `\n  ${detail}` : ''}`);
  checks++;
  console.log(`ok - ${what}`);
}

/// Console errors and uncaught exceptions of a page, and failed responses of its requests.
function watch(page) {
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()} (${m.location().url || 'no location'})`); });
  page.on('pageerror', (e) => errors.push(`exception: ${e.message}`));
  page.on('requestfailed', (r) => errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  // A confirmation dialog, if an action has one, is accepted (and said).
  page.on('dialog', async (d) => { console.log(`  dialog: ${d.message()}`); await d.accept(); });
  return errors;
}

/// Opens `url` in `page`: it must answer 200 and leave no console error.
async function visit(page, errors, url, what) {
  errors.length = 0;
  const resp = await page.goto(url, { waitUntil: 'load' });
  const shown = `${new URL(url).pathname}${new URL(url).search}`;
  check(resp && resp.status() === 200, `${what}: GET ${shown.length > 80 ? `${shown.slice(0, 80)}…` : shown} answers 200`,
    resp ? `status ${resp.status()}` : 'no response');
  await noErrors(page, errors, what);
}

async function noErrors(page, errors, what) {
  // Late errors (a script's, a subresource's) arrive after load.
  await page.waitForLoadState('networkidle').catch(() => {});
  check(errors.length === 0, `${what}: no console error`, errors.join('\n  '));
}

async function text(page, selector) {
  return (await page.locator(selector).first().innerText()).trim();
}

/// The points of every polyline in the page's SVG charts that draws a non-zero value.
async function drawnSeries(page) {
  return page.$$eval('svg polyline, svg path', (els) => els
    .map((e) => {
      const pts = (e.getAttribute('points') || e.getAttribute('d') || '').trim();
      const box = e.getBBox();
      return { pts, height: box.height, width: box.width, name: e.querySelector('title')?.textContent || '' };
    })
    .filter((s) => s.pts.length > 0 && s.width > 0 && s.height > 0));
}

async function adminSuite(ctx) {
  const page = await ctx.newPage();
  await page.setViewportSize({ width: 1000, height: 1100 }); // two charts a row, as in the screenshot
  const errors = watch(page);
  const A = fx.admin;

  // Overview: every queue, charts drawn from jobq.throughput.
  await visit(page, errors, `${A}/`, 'overview');
  check(await text(page, 'h1') === 'Overview', 'overview: its title');
  for (const q of fx.queues) {
    check(await page.locator(`#live table a[href="/queues/${q}"]`).count() === 1, `overview: queue ${q} in the table`);
  }
  check(await page.locator('#live tr.bad', { hasText: fx.queue }).count() === 1,
    `overview: queue ${fx.queue} (dead jobs) is marked failing`);
  check(/connected as dash_admin · may act/.test(await text(page, 'nav .who')), 'overview: says it may act');
  const series = await drawnSeries(page);
  check(series.length > 0, `overview: a chart drawn (${series.length} series with values)`);
  check(series.some((s) => s.name === 'completed'), 'overview: a completed series among them',
    series.map((s) => s.name).join(', '));
  const svgs = await page.locator('#live svg').count();
  check(svgs >= 2 * 2 * fx.queues.length, `overview: ${svgs} charts (two per window per queue)`);
  // The page polls its fragment every 5 s: the charts must still be there after a refresh.
  // The content before the poll is marked: the swap replaces it, marks and all.
  await page.$eval('#live', (el) => { for (const c of el.children) c.setAttribute('data-before-poll', ''); });
  const refreshed = page.waitForResponse((r) => r.url().endsWith('/fragments/overview'), { timeout: 15000 });
  const frag = await refreshed;
  check(frag.status() === 200, 'overview: the 5 s poll of /fragments/overview answers 200');
  await page.waitForFunction(() => document.querySelector('#live > *') && !document.querySelector('#live [data-before-poll]'),
    null, { timeout: 15000 });
  check((await drawnSeries(page)).length > 0, 'overview: charts still drawn after the poll');
  await noErrors(page, errors, 'overview after the poll');
  await page.screenshot({ path: fx.screenshot });
  console.log(`  screenshot: ${fx.screenshot}`);

  // A queue page: through the overview's link.
  await page.locator(`#live table a[href="/queues/${fx.queue}"]`).click();
  await page.waitForURL(`${A}/queues/${fx.queue}`);
  await noErrors(page, errors, 'queue page');
  check(await text(page, 'h1') === `Queue ${fx.queue}`, `queue page: its title, reached from the overview's link`);
  check(await page.locator('table td a', { hasText: fx.kind }).count() === 1, `queue page: kind ${fx.kind} listed`);
  check((await drawnSeries(page)).length > 0, 'queue page: a chart drawn');
  check(await page.getByRole('button', { name: 'Pause queue' }).count() === 1, 'queue page: a Pause button for the admin');

  // Jobs: filter state=dead through the form.
  await visit(page, errors, `${A}/jobs`, 'jobs');
  const all = await page.locator('main table tbody tr').count();
  check(all > 2, `jobs: ${all} jobs listed unfiltered`);
  await page.locator('form.filters select[name=state]').selectOption('dead');
  await Promise.all([page.waitForURL(/\/jobs\?/), page.getByRole('button', { name: 'Filter' }).click()]);
  await noErrors(page, errors, 'jobs filtered');
  const url = new URL(page.url());
  check(url.searchParams.get('state') === 'dead', 'jobs: the URL keeps the filter state=dead', page.url());
  const states = await page.locator('main table tbody tr td:nth-child(4)').allInnerTexts();
  check(states.length === 2 && states.every((s) => s.trim() === 'dead'), 'jobs: only the two dead jobs listed',
    JSON.stringify(states));
  for (const id of [fx.deadRetried, fx.deadForged]) {
    check(await page.locator(`main table a[href="/jobs/${id}"]`).count() === 1, `jobs: dead job ${id} listed`);
  }
  check(await page.locator('form.filters select[name=state]').inputValue() === 'dead', 'jobs: the form still shows state dead');
  check(/2<\/strong> jobs match|^2 jobs match/.test(await text(page, 'main > p')), 'jobs: "2 jobs match"', await text(page, 'main > p'));
  // Reload by URL: the same list.
  await visit(page, errors, page.url(), 'jobs filtered, reloaded');
  check(await page.locator('main table tbody tr').count() === 2, 'jobs: the filtered URL reloads the same two jobs');

  // A job page, reached from the list, and its retry.
  await page.locator(`main table a[href="/jobs/${fx.deadRetried}"]`).click();
  await page.waitForURL(`${A}/jobs/${fx.deadRetried}`);
  await noErrors(page, errors, 'job page');
  check(await text(page, 'h1') === `Job ${fx.deadRetried}`, 'job page: its title, reached from the list');
  check(await text(page, 'main p strong') === 'dead', 'job page: state dead');
  check((await page.locator('main').innerText()).includes('550 mailbox unavailable'), "job page: the attempt's error");
  check(await page.locator('main h2', { hasText: 'Timeline' }).count() === 1, 'job page: a timeline');
  const retry = page.getByRole('button', { name: 'Retry' });
  check(await retry.count() === 1, 'job page: a Retry button for the admin');
  await Promise.all([page.waitForURL(/msg=retried/), retry.click()]);
  await noErrors(page, errors, 'job page after retry');
  check((await page.locator('.msg').innerText()).includes('ready again'), 'job page: "The job is ready again."');
  await visit(page, errors, `${A}/jobs/${fx.deadRetried}`, 'job page reloaded');
  check(await text(page, 'main p strong') === 'ready', 'job page: the retried job is shown ready after a reload');
  check(await page.getByRole('button', { name: 'Cancel' }).count() === 1, 'job page: now a Cancel button instead');

  // The other pages.
  await visit(page, errors, `${A}/workers`, 'workers');
  check(await page.locator('main table td', { hasText: fx.worker }).count() === 1, `workers: ${fx.worker} listed`);
  await visit(page, errors, `${A}/locks`, 'locks');
  check(await page.locator('main table td', { hasText: fx.lock }).count() >= 1, `locks: lock ${fx.lock} listed`);
  check(await page.locator('main h2', { hasText: 'Concurrency slots in use' }).count() === 1, 'locks: concurrency slots');
  await visit(page, errors, `${A}/schedules`, 'schedules');
  check(await page.locator('main table td', { hasText: fx.schedule }).count() === 1, `schedules: ${fx.schedule} listed`);
  await visit(page, errors, `${A}/rate-limits`, 'rate limits');
  check(await page.locator('main table td', { hasText: fx.rateLimit }).count() === 1, `rate limits: ${fx.rateLimit} listed`);
  await visit(page, errors, `${A}/health`, 'health');
  check(await page.locator('main .badge.ok', { hasText: 'last pass' }).count() === 1, "health: the background worker's last pass");
  check(await page.locator('main table.kv th', { hasText: 'notify_queue_usage' }).count() === 1, 'health: NOTIFY queue usage');
  // Every nav link leads to a page that answers.
  const nav = await page.locator('nav a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
  for (const href of nav) await visit(page, errors, `${A}${href}`, `nav link ${href}`);
  await page.close();
}

async function readerSuite(ctx) {
  const page = await ctx.newPage();
  const errors = watch(page);
  const R = fx.reader;

  await visit(page, errors, `${R}/`, 'reader overview');
  check(/connected as dash_reader · read-only/.test(await text(page, 'nav .who')), 'reader: says read-only');
  check((await drawnSeries(page)).length > 0, 'reader overview: a chart drawn');

  await visit(page, errors, `${R}/jobs/${fx.deadForged}`, 'reader job page');
  check(await text(page, 'main p strong') === 'dead', 'reader job page: state dead');
  check(await page.locator('form[method=post], main button').count() === 0, 'reader job page: no action form or button');
  await visit(page, errors, `${R}/queues/${fx.queue}`, 'reader queue page');
  check(await page.locator('form[method=post], main button').count() === 0, 'reader queue page: no action form or button');
  check((await drawnSeries(page)).length > 0, 'reader queue page: a chart drawn');
  await visit(page, errors, `${R}/jobs?state=dead`, 'reader jobs');
  check(await page.locator('a[href*="/jobs/bulk"]').count() === 0, 'reader jobs: no bulk action links');

  // Forged actions from the page itself, with the best token there is: the CSRF cookie of
  // this browser (HttpOnly, so only the browser's owner reads it), sent as the form field.
  await visit(page, errors, `${R}/jobs/${fx.deadForged}`, 'reader job page again');
  const cookie = (await ctx.cookies(R)).find((c) => c.name === 'jobq_dash_csrf');
  check(cookie && cookie.httpOnly, 'reader: the CSRF cookie is set, HttpOnly');
  const post = (path, fields) => page.evaluate(async ([path, fields]) => {
    const r = await fetch(path, { method: 'POST', body: new URLSearchParams(fields), credentials: 'same-origin', redirect: 'manual' });
    return { status: r.status, body: await r.text() };
  }, [path, fields]);
  let r = await post(`/jobs/${fx.deadForged}/retry`, { csrf: cookie.value });
  check(r.status === 403, 'reader: a forged retry with a valid CSRF token is refused with 403', `status ${r.status}`);
  check(r.body.includes('actions are disabled'), 'reader: refused because the role may not act (not for the token)', r.body);
  r = await post(`/jobs/${fx.deadForged}/retry`, {});
  check(r.status === 403, 'reader: a forged retry without a token is refused with 403', `status ${r.status}`);
  r = await post(`/queues/${fx.queue}/pause`, { csrf: cookie.value });
  check(r.status === 403, 'reader: a forged pause is refused with 403', `status ${r.status}`);
  await visit(page, errors, `${R}/jobs/${fx.deadForged}`, 'reader job page after the forgery');
  check(await text(page, 'main p strong') === 'dead', 'reader: the job is still dead');
  await page.close();
}

/// In the page: how it fits the window, and whether each of `names` is whole somewhere (in
/// text no ancestor cuts, or as the title, the tooltip, of what shows it).
function measure(names) {
  const cuts = (e) => {
    const s = getComputedStyle(e);
    return (s.overflowX === 'hidden' || s.overflowX === 'clip') && e.scrollWidth > e.clientWidth + 1;
  };
  const cut = (node) => {
    for (let e = node.parentElement; e; e = e.parentElement) if (cuts(e)) return true;
    return false;
  };
  const texts = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) texts.push(walk.currentNode);
  const titles = [...document.querySelectorAll('[title]')].map((e) => e.getAttribute('title'));
  const short = (s) => (s.length > 60 ? `${s.slice(0, 60)}…` : s);
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    offScreen: [...document.querySelectorAll('td, th, h1, h2, p')]
      .filter((c) => c.getBoundingClientRect().right > window.innerWidth + 0.5)
      .map((c) => short(`${c.tagName}: ${c.textContent.trim()}`)),
    // A text field's text is its value.
    cutWithoutTitle: [...document.querySelectorAll('body *')]
      .filter((e) => cuts(e) && e.getAttribute('title') !== (e.tagName === 'INPUT' ? e.value : e.textContent.trim()))
      .map((e) => short(e.outerHTML)),
    unreachable: names
      .filter((n) => !titles.includes(n) && !texts.some((t) => t.textContent.includes(n) && !cut(t)))
      .map(short),
  };
}

async function longNamesSuite(ctx) {
  const page = await ctx.newPage();
  await page.setViewportSize({ width: 1400, height: 900 });
  const errors = watch(page);
  const { url, job, names: n } = fx.long;
  const q = encodeURIComponent;
  const pages = [
    ['/', 'overview', [n.queue]],
    [`/queues/${q(n.queue)}`, 'queue page', [n.queue, n.kind]],
    ['/jobs', 'jobs', [n.queue, n.kind]],
    [`/jobs?queue=${q(n.queue)}&kind=${q(n.kind)}&key=${q(n.unique)}`, 'jobs filtered', [n.queue, n.kind]],
    [`/jobs/bulk?queue=${q(n.queue)}&action=cancel`, 'bulk cancel', [n.queue]],
    [`/jobs/${job}`, 'job page', [n.queue, n.kind, n.unique, n.concurrency, n.rate]],
    ['/locks', 'locks', [n.lock, n.unique, n.concurrency]],
    ['/schedules', 'schedules', [n.schedule, n.queue, n.kind]],
    ['/workers', 'workers', [n.worker]],
    ['/rate-limits', 'rate limits', [n.rate]],
    ['/health', 'health', []],
  ];
  for (const [path, what, names] of pages) {
    await visit(page, errors, `${url}${path}`, `long names, ${what}`);
    const m = await page.evaluate(measure, names);
    check(m.scrollWidth <= m.innerWidth, `long names, ${what}: fits 1400 px (${m.scrollWidth} px wide)`);
    check(m.offScreen.length === 0, `long names, ${what}: no cell or heading past the window's edge`, m.offScreen.join('\n  '));
    check(m.cutWithoutTitle.length === 0, `long names, ${what}: whatever is cut has its whole text as its title`,
      m.cutWithoutTitle.join('\n  '));
    check(m.unreachable.length === 0, `long names, ${what}: ${names.length} names whole in text or title`,
      m.unreachable.join('\n  '));
  }
  // The overview's table shows every count and state of the long queue's row on screen.
  await visit(page, errors, `${url}/`, 'long names, overview again');
  const row = page.locator('#live table tbody tr', { hasText: n.queue.slice(0, 40) });
  check(await row.count() === 1, 'long names, overview: the queue in the table');
  const cells = await row.locator('td').evaluateAll((tds) => tds.map((td) => {
    const r = td.getBoundingClientRect();
    return { text: td.innerText.trim(), left: r.left, right: r.right };
  }));
  check(cells.length === 9 && cells.every((c) => c.left >= 0 && c.right <= 1400),
    "long names, overview: the queue's 9 cells on screen", JSON.stringify(cells.map((c) => [c.text.slice(0, 20), c.right])));
  check(cells[8].text === 'failing', 'long names, overview: its status reads failing', cells[8].text);
  await page.close();
}

const dataDir = mkdtempSync(join(tmpdir(), 'jobq-dash-chromium-'));
let ctx;
let code = 0;
try {
  // A persistent context on a fresh temporary profile: the --user-data-dir it passes is ours.
  ctx = await chromium.launchPersistentContext(dataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    timeout: 60000,
  });
  ctx.setDefaultTimeout(15000);
  console.log(`# Chromium ${ctx.browser()?.version() ?? ''}; admin ${fx.admin}, reader ${fx.reader}`);
  console.log('# as jobq_admin');
  await adminSuite(ctx);
  console.log('# as jobq_reader');
  await ctx.clearCookies(); // cookies are per host, not per port: the reader's are its own
  await readerSuite(ctx);
  console.log('# names of 900 bytes, in a 1400 px window');
  await ctx.clearCookies();
  await longNamesSuite(ctx);
  console.log(`# ${checks} checks passed`);
} catch (e) {
  code = 1;
  console.log(e instanceof Failure ? e.message : `FAIL - ${e.stack || e}`);
  console.log(`# failed after ${checks} passed checks`);
} finally {
  await ctx?.close().catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
}
process.exit(code);
