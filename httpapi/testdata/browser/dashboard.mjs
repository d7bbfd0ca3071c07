// Drives the leasesvc dashboard (/ui/) in Debian's chromium through
// playwright-core. Run by httpapi's TestDashboardInBrowser, which starts the
// services and passes them in the environment:
//
//   OPEN_URL   a service without authentication; OPEN_URL/test/advance?ms=N
//              moves its backend clock forward (to lay out a history)
//   AUTH_URL   a service with static tokens and the test policy
//   READ_TOKEN a token that may read team-a. only; WRITE_A may acquire
//              team-a., WRITE_ALL anything
//   SHOTS      where the screenshots go
//
// Each check prints one line; the first failure exits 1.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const OPEN = env('OPEN_URL');
const AUTH = env('AUTH_URL');
const SHOTS = env('SHOTS');
mkdirSync(SHOTS, { recursive: true });

const LIMIT_MS = 1000; // the page shows a change within 1 s of its answer

async function api(base, path, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(base + path, { method: body ? 'POST' : 'GET', headers, body: body && JSON.stringify(body) });
  const j = await r.json();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${JSON.stringify(j)}`);
  return j;
}
const acquire = (base, name, holder, ttlMs, token) => api(base, `/v1/leases/${name}:acquire`, { holder, ttlMs }, token);
const release = (base, l, token) => api(base, `/v1/leases/${l.name}:release`, { holder: l.holder, fencingToken: l.fencingToken }, token);
const renew = (base, l, token) => api(base, `/v1/leases/${l.name}:renew`, { holder: l.holder, fencingToken: l.fencingToken }, token);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// session acts on a lease as the instance owning a session would (the test
// service's /test/session: acquire through a new session of window windowMs,
// renew, or expire as when the agent's heartbeats stopped).
async function session(op, name, holder = '', windowMs = 0) {
  const q = new URLSearchParams({ op, name, holder, windowMs: String(windowMs) });
  const r = await fetch(`${OPEN}/test/session?${q}`, { method: 'POST' });
  if (!r.ok) throw new Error(`session ${op} ${name}: ${r.status} ${await r.text()}`);
  return r.json();
}
async function advance(ms) {
  const r = await fetch(`${OPEN}/test/advance?ms=${ms}`, { method: 'POST' });
  if (!r.ok) throw new Error(`advance: ${r.status}`);
}

function ok(what, extra = '') {
  console.log(`ok   ${what}${extra ? ' ' + extra : ''}`);
}

// checkOrder: the led leases come first, then the others, each group in
// name order.
async function checkOrder(page, what) {
  const rows = await page.$$eval('.row.lease', (rs) => rs.map((r) => ({ name: r.dataset.name, held: r.dataset.held === 'true' })));
  const firstFree = rows.findIndex((r) => !r.held);
  const led = firstFree < 0 ? rows : rows.slice(0, firstFree);
  const free = firstFree < 0 ? [] : rows.slice(firstFree);
  const sorted = (g) => g.every((r, i) => i === 0 || g[i - 1].name < r.name);
  if (free.some((r) => r.held) || !sorted(led) || !sorted(free)) {
    throw new Error(`${what}: rows ${JSON.stringify(rows)}, want the led ones first, then the free ones, each in name order`);
  }
  ok(what, `(${led.length} led, then ${free.length} free)`);
}

// checkNotCut: no "last holder · …" / "since …" line under a holder is cut
// short: it wraps instead.
async function checkNotCut(page, what) {
  const cut = await page.$$eval('.row.lease .how', (hs) => hs.filter((h) => h.scrollWidth > h.clientWidth + 1 || h.scrollHeight > h.clientHeight + 1).map((h) => h.textContent));
  if (cut.length) throw new Error(`${what}: cut short: ${JSON.stringify(cut)}`);
  ok(what);
}

// scene lays out ten minutes of history on the open service: hand-overs,
// an expiry with a long gap, a lease left without a leader for 90 s.
async function scene() {
  const m = 60_000;
  let sched = await acquire(OPEN, 'team-a.scheduler', 'sched-7f2c', 10 * m);
  let idx = await acquire(OPEN, 'team-a.indexer', 'indexer-0', m);
  let mail = await acquire(OPEN, 'team-a.mailer', 'mailer-a1', 10 * m);
  await acquire(OPEN, 'team-a.compactor', 'compactor-3', 30 * m);
  await acquire(OPEN, 'team-b.billing', 'billing-1', 30 * m);
  await advance(90_000);
  mail = await release(OPEN, mail);
  await advance(4_000);
  mail = await acquire(OPEN, 'team-a.mailer', 'mailer-b2', 10 * m);
  await advance(80_000);
  let exp = await acquire(OPEN, 'team-a.export', 'export-runner', 10 * m);
  await advance(60_000);
  sched = await release(OPEN, sched);
  await advance(12_000);
  sched = await acquire(OPEN, 'team-a.scheduler', 'sched-91ab', 10 * m);
  // The indexer's holding ran out 3.5 min ago: the next one starts after a gap.
  idx = await acquire(OPEN, 'team-a.indexer', 'indexer-1', 10 * m);
  await advance(100_000);
  mail = await release(OPEN, mail);
  await advance(5_000);
  mail = await acquire(OPEN, 'team-a.mailer', 'mailer-a1', 10 * m);
  exp = await release(OPEN, exp);
  await advance(90_000);
  sched = await release(OPEN, sched);
  await advance(1_500);
  await acquire(OPEN, 'team-a.scheduler', 'sched-7f2c', 5 * m);
  await advance(20_000);
  return { idx, mail };
}

async function waitRow(page, name, cond, what, since, limit = LIMIT_MS) {
  try {
    await page.waitForFunction(
      ([n, c]) => {
        const r = document.querySelector(`.row.lease[data-name="${n}"]`);
        if (!r) return false;
        return Object.entries(c).every(([k, v]) => r.dataset[k] === v);
      },
      [name, cond],
      { timeout: limit, polling: 20 },
    );
  } catch (err) {
    const rows = await page.$$eval('.row.lease', (rs) => rs.map((r) => ({ ...r.dataset })));
    throw new Error(`${what}: not shown within ${limit} ms; rows: ${JSON.stringify(rows)}`);
  }
  const took = Date.now() - since;
  ok(what, `(${took} ms)`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
});
const failures = [];
const pageErrors = [];
try {
  await scene();
  ok('scene laid out');

  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 }, colorScheme: 'light' });
  const page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  await page.goto(`${OPEN}/ui/?prefix=team-a.`);
  await page.waitForSelector('.row.lease[data-name="team-a.scheduler"]', { timeout: 5000 });
  const names = await page.$$eval('.row.lease', (rs) => rs.map((r) => r.dataset.name));
  if (names.includes('team-b.billing')) throw new Error(`prefix team-a. shows ${names}`);
  ok('the page lists the leases under the prefix', JSON.stringify(names));
  await checkOrder(page, 'led leases are listed first, then the free ones');
  // Terms are drawn in their holder's colour: the legend's swatch shows
  // several holders' colours and says so, rather than one blue.
  const legend = await page.$eval('.legend .sw-term', (e) => ({ image: getComputedStyle(e).backgroundImage, text: e.parentElement.textContent }));
  const colours = new Set(legend.image.match(/rgb\([^)]*\)/g) || []);
  if (!/gradient/.test(legend.image) || colours.size < 3 || !/one colour per holder/.test(legend.text)) {
    throw new Error(`the legend's term swatch: ${JSON.stringify(legend)}, want several holders' colours and "one colour per holder"`);
  }
  ok('the legend shows terms in their holders\' colours', JSON.stringify(legend.text));
  const terms = await page.$eval('.row.lease[data-name="team-a.scheduler"] .terms summary', (e) => e.textContent);
  if (!/^[3-9] terms/.test(terms)) throw new Error(`scheduler timeline: ${terms}, want its 3 terms from the service's recent events`);
  const longGaps = await page.$$eval('.row.lease[data-name="team-a.indexer"] .seg.gap.long', (s) => s.length);
  if (longGaps !== 1) throw new Error(`indexer timeline: ${longGaps} long gaps, want 1`);
  ok('timelines show recent terms and the gap > 60 s', terms);

  // Countdown: the time left goes down on the page's own clock.
  const left1 = await page.$eval('.row.lease[data-name="team-a.compactor"] .left', (e) => e.textContent);
  await page.waitForTimeout(1200);
  const left2 = await page.$eval('.row.lease[data-name="team-a.compactor"] .left', (e) => e.textContent);
  if (left1 === left2) throw new Error(`time left does not count down: ${left1} → ${left2}`);
  ok('time left counts down', `${left1} → ${left2}`);

  let t = Date.now();
  let l = await acquire(OPEN, 'team-a.fresh', 'agent-x', 30_000);
  await waitRow(page, 'team-a.fresh', { held: 'true', holder: 'agent-x', token: '1' }, 'a new lease is listed within 1 s of its acquire', t);

  await release(OPEN, l);
  t = Date.now();
  l = await acquire(OPEN, 'team-a.fresh', 'agent-y', 30_000);
  await waitRow(page, 'team-a.fresh', { held: 'true', holder: 'agent-y', token: '2' }, 'the new holder is shown within 1 s of a hand-over', t);

  t = Date.now();
  await release(OPEN, l);
  await waitRow(page, 'team-a.fresh', { held: 'false' }, 'a released lease is shown free within 1 s', t);
  const st = await page.$eval('.row.lease[data-name="team-a.fresh"] .state', (e) => e.textContent);
  if (st !== 'free') throw new Error(`released lease state ${st}, want free`);
  await checkOrder(page, 'a lease that fell free moves below the led ones');

  // A holder that renews every 0.6 s with a 2 s TTL is led, with time left,
  // the whole minute: renewals are not events, the stream's refresh events
  // bring the time left anew. Sampled every 200 ms.
  let hb = await acquire(OPEN, 'team-a.heartbeat', 'hb-1', 2000);
  t = Date.now();
  await waitRow(page, 'team-a.heartbeat', { held: 'true', holder: 'hb-1' }, 'a lease renewed every 0.6 s (TTL 2 s) is listed', t);
  let renewing = true;
  let renewErr = null;
  let renewals = 0;
  const renewer = (async () => {
    while (renewing) {
      const start = Date.now();
      try {
        hb = await renew(OPEN, hb);
        renewals++;
      } catch (err) {
        renewErr = err;
        return;
      }
      await sleep(Math.max(0, 600 - (Date.now() - start)));
    }
  })();
  const SPAN_MS = 60_000;
  let samples = 0;
  let minLeft = Infinity;
  const bad = [];
  const t0 = Date.now();
  while (Date.now() - t0 < SPAN_MS && !renewErr) {
    const row = await page.$eval('.row.lease[data-name="team-a.heartbeat"]', (r) => ({
      held: r.dataset.held, left: Number(r.dataset.leftMs), state: r.querySelector('.state').textContent, text: r.querySelector('.left').textContent,
    }));
    samples++;
    minLeft = Math.min(minLeft, row.left);
    if (row.held !== 'true' || row.state !== 'led' || !(row.left > 0)) bad.push({ at: Date.now() - t0, ...row });
    await sleep(200);
  }
  renewing = false;
  await renewer;
  if (renewErr) throw new Error(`the holder's renewal failed after ${renewals} renewals (${renewErr.message}): the machine was too slow to renew within the 2 s TTL`);
  if (bad.length) throw new Error(`the renewed lease was not shown led with time left in ${bad.length} of ${samples} samples, first ${JSON.stringify(bad.slice(0, 5))}`);
  ok('a lease renewed every 0.6 s with a 2 s TTL is shown led with time left for 60 s', `(${samples} samples every 200 ms, ${renewals} renewals, least time left shown ${minLeft} ms)`);
  t = Date.now();
  await release(OPEN, hb);
  await waitRow(page, 'team-a.heartbeat', { held: 'false' }, 'the renewed lease, released, is shown free within 1 s', t);

  // Who is next: a waiting candidate (priority 5, asking to preempt) on the
  // scheduler, and a lease transferred to a named successor. Registrations
  // are not events: they come with the refresh events.
  const sched = await api(OPEN, '/v1/leases/team-a.scheduler');
  const candidate = fetch(`${OPEN}/v1/leases/team-a.scheduler:acquire`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ holder: 'sched-standby', ttlMs: 60_000, waitMs: 60_000, priority: 5, preempt: true }),
  }).catch(() => {}); // answered when the service stops
  t = Date.now();
  await waitRow(page, 'team-a.scheduler', { candidates: '1', next: 'sched-standby', held: 'true', holder: sched.holder },
    'a waiting candidate and the yield it asks are shown within 3 s', t, 3000);
  const badges = await page.$eval('.row.lease[data-name="team-a.scheduler"] .badges', (b) => b.textContent);
  if (!/1 waiting · best 5/.test(badges) || !/yield → sched-standby/.test(badges)) throw new Error(`scheduler badges: ${badges}`);
  const rep = await acquire(OPEN, 'team-a.reports', 'reports-1', 60_000);
  await api(OPEN, '/v1/leases/team-a.reports:transfer', { holder: rep.holder, fencingToken: rep.fencingToken, to: 'reports-2', reserveMs: 60_000 });
  t = Date.now();
  await waitRow(page, 'team-a.reports', { held: 'false', next: 'reports-2' }, 'a transfer\'s successor is shown as next within 1 s', t);
  void candidate;

  // Sessions (docs/contract.md §14): a holding held through a session lasts
  // while its agent heartbeats and ends within the session's window of the
  // last one. Its expireTime is the backend record's 30 s TTL, which the
  // instance renews: the page must not count that down as the time left.
  t = Date.now();
  await session('acquire', 'team-a.planner', 'planner-1', 1000);
  await waitRow(page, 'team-a.planner', { held: 'true', holder: 'planner-1', session: 'true', windowMs: '1000' },
    'a lease held through a session is listed within 1 s, session-held, window 1 s', t);
  const sessRow = () => page.$eval('.row.lease[data-name="team-a.planner"]', (r) => ({
    badges: r.querySelector('.badges').textContent, left: r.querySelector('.left').textContent,
    leftTitle: r.querySelector('.left').title, meter: r.querySelector('.meter').title, fill: r.querySelector('.fill').style.width,
    state: r.querySelector('.state').textContent,
  }));
  const sr = await sessRow();
  if (!sr.badges.includes('session, window 1 s')) throw new Error(`session badges: ${JSON.stringify(sr.badges)}, want "session, window 1 s"`);
  if (sr.left !== 'while alive' || sr.fill !== '100%' || sr.state !== 'led') throw new Error(`session holding's time left: ${JSON.stringify(sr)}, want "while alive" and a full bar, led`);
  if (!/within 1 s of the last heartbeat/.test(sr.leftTitle) || !/only if the service stopped renewing/.test(sr.meter)) {
    throw new Error(`session holding's tooltips: ${JSON.stringify(sr)}`);
  }
  // Over 2.5 s, with a renewal by its instance between (a refresh event),
  // it never turns into a countdown of the backend TTL.
  for (let i = 0; i < 10; i++) {
    if (i === 4) await session('renew', 'team-a.planner');
    await sleep(250);
    const x = await sessRow();
    if (x.left !== 'while alive' || !x.badges.includes('session, window 1 s')) throw new Error(`session holding after ${(i + 1) * 250} ms: ${JSON.stringify(x)}`);
  }
  ok('a session holding shows "session, window 1 s" and "while alive", not the backend TTL\'s countdown', JSON.stringify(sr.badges));
  t = Date.now();
  await session('acquire', 'team-a.notifier', 'notifier-1', 300);
  await waitRow(page, 'team-a.notifier', { held: 'true', session: 'true', windowMs: '300' }, 'a 300 ms session window is shown', t);
  const nb = await page.$eval('.row.lease[data-name="team-a.notifier"] .badges', (b) => b.textContent);
  if (!nb.includes('session, window 300 ms')) throw new Error(`notifier badges: ${JSON.stringify(nb)}`);
  t = Date.now();
  await session('expire', 'team-a.notifier');
  await waitRow(page, 'team-a.notifier', { held: 'false', windowMs: '0' }, 'a lease whose session died is shown free within 1 s', t);
  const nh = await page.$eval('.row.lease[data-name="team-a.notifier"] .how', (e) => e.textContent);
  if (nh !== 'last holder · session expired') throw new Error(`the end of a holding whose session died: ${JSON.stringify(nh)}, want "last holder · session expired"`);
  ok('the end of a holding whose session died is told as "session expired"');
  await checkNotCut(page, 'at 1280 px no line under a holder is cut short');

  await page.waitForTimeout(400);
  await page.screenshot({ path: join(SHOTS, 'dashboard-1280-light.png'), fullPage: true });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForTimeout(800);
  await page.screenshot({ path: join(SHOTS, 'dashboard-1280-dark.png'), fullPage: true });
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, colorScheme: 'light', isMobile: true, hasTouch: true });
  const pp = await phone.newPage();
  pp.on('pageerror', (e) => pageErrors.push(String(e)));
  await pp.goto(`${OPEN}/ui/?prefix=team-a.`);
  await pp.waitForSelector('.row.lease[data-name="team-a.scheduler"]', { timeout: 5000 });
  await pp.waitForTimeout(500);
  // A page opened after a session died learns it from the recent events.
  await pp.waitForFunction(() => document.querySelector('.row.lease[data-name="team-a.notifier"] .how')?.textContent === 'last holder · session expired',
    null, { timeout: 2000, polling: 50 })
    .catch(async () => {
      const h = await pp.$eval('.row.lease[data-name="team-a.notifier"] .how', (e) => e.textContent).catch(() => '(no row)');
      throw new Error(`a page opened after the session died shows its end as ${JSON.stringify(h)}, want "last holder · session expired"`);
    });
  ok('a page opened later also tells the end of a holding whose session died');
  const overflow = await pp.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) throw new Error(`at 390 px the page is ${overflow} px wider than the screen`);
  await checkNotCut(pp, 'at 390 px no line under a holder is cut short');
  await checkOrder(pp, 'at 390 px too, led leases come first');
  await pp.$eval('.row.lease[data-name="team-a.indexer"] details', (d) => { d.open = true; });
  await pp.screenshot({ path: join(SHOTS, 'dashboard-390-light.png'), fullPage: true });
  await pp.emulateMedia({ colorScheme: 'dark' });
  await pp.waitForTimeout(800);
  await pp.screenshot({ path: join(SHOTS, 'dashboard-390-dark.png'), fullPage: true });
  ok('screenshots at 1280 and 390 px, light and dark', SHOTS);

  // A deleted lease disappears from the page (docs/contract.md §15).
  t = Date.now();
  const del = await fetch(`${OPEN}/v1/leases/team-a.fresh`, { method: 'DELETE' });
  if (!del.ok) throw new Error(`DELETE team-a.fresh: ${del.status} ${await del.text()}`);
  await page.waitForFunction(() => !document.querySelector('.row.lease[data-name="team-a.fresh"]'), null, { timeout: LIMIT_MS, polling: 20 })
    .catch(() => { throw new Error(`a deleted lease is still shown ${LIMIT_MS} ms after its delete`); });
  ok('a deleted lease disappears within 1 s', `(${Date.now() - t} ms)`);
  await phone.close();
  await ctx.close();

  // With authentication on, the page asks for a token, keeps it in the
  // tab's session only, and shows only what that principal may read.
  await acquire(AUTH, 'team-a.sched', 'alice-1', 60_000, env('WRITE_A'));
  await acquire(AUTH, 'team-b.sched', 'flows-1', 60_000, env('WRITE_ALL'));
  const actx = await browser.newContext({ viewport: { width: 1280, height: 700 } });
  const ap = await actx.newPage();
  ap.on('pageerror', (e) => pageErrors.push(String(e)));
  await ap.goto(`${AUTH}/ui/`);
  await ap.waitForSelector('#auth:not([hidden])', { timeout: 5000 });
  if (await ap.$('.row.lease')) throw new Error('leases shown before a token was given');
  if (!(await ap.$eval('#main', (m) => m.classList.contains('locked')))) throw new Error('the lease list is not hidden behind the token field');
  await ap.screenshot({ path: join(SHOTS, 'dashboard-auth-1280.png') });
  ok('with auth on, the token field gates the page');
  await ap.fill('#token', 'not-a-valid-token-000000');
  await ap.click('#auth-form button');
  await ap.waitForFunction(() => /refused/.test(document.getElementById('auth-why').textContent), null, { timeout: 5000 });
  if (await ap.$('.row.lease')) throw new Error('leases shown with a refused token');
  ok('a refused token keeps the page gated');
  await ap.fill('#token', env('READ_TOKEN'));
  await ap.click('#auth-form button');
  await ap.waitForSelector('.row.lease[data-name="team-a.sched"]', { timeout: 5000 });
  await ap.waitForTimeout(300);
  const shown = await ap.$$eval('.row.lease', (rs) => rs.map((r) => r.dataset.name));
  if (shown.includes('team-b.sched')) throw new Error(`a reader of team-a. sees ${shown}`);
  const stored = await ap.evaluate(() => ({ s: sessionStorage.getItem('leasesvc.token'), l: localStorage.length, c: document.cookie }));
  if (stored.s !== env('READ_TOKEN') || stored.l !== 0 || stored.c !== '') throw new Error(`token storage ${JSON.stringify(stored)}`);
  ok('with a token, only readable leases are shown; the token is in sessionStorage only', JSON.stringify(shown));
  t = Date.now();
  await acquire(AUTH, 'team-a.new', 'alice-2', 60_000, env('WRITE_A'));
  await waitRow(ap, 'team-a.new', { held: 'true', holder: 'alice-2' }, 'with auth on, a new lease is listed within 1 s', t);
  // A new tab of the same browser has a new session: it asks again.
  const ap2 = await actx.newPage();
  await ap2.goto(`${AUTH}/ui/`);
  await ap2.waitForSelector('#auth:not([hidden])', { timeout: 5000 });
  ok('another tab asks for the token again');
  await actx.close();
} catch (err) {
  failures.push(err.message || String(err));
} finally {
  await browser.close();
}
if (pageErrors.length) failures.push('page errors: ' + pageErrors.join(' | '));
for (const f of failures) console.log(`FAIL ${f}`);
process.exit(failures.length ? 1 : 0);
