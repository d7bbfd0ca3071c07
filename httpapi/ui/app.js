// leasesvc dashboard (docs/contract.md §11): the leases under a prefix, live
// from the prefix stream GET /v1/leases:watch (§10), read with fetch() so
// that an Authorization header can be sent (EventSource cannot send one).
//
// Clocks: a countdown starts from the lease's remainingMs when the page
// received it and runs on performance.now() (monotonic); the browser's
// wall clock is never compared with a server time. The stream's `refresh`
// events (asked for with refresh=true) bring a held lease's remainingMs
// anew after renewals, which are not events. The timeline's "now" is the
// newest server time received, advanced by the same monotonic clock.
'use strict';

(() => {
  const WINDOW_MS = 10 * 60 * 1000; // the timeline's span
  const LONG_GAP_MS = 60 * 1000; // a gap with no leader longer than this is highlighted
  const IDLE_MS = 45 * 1000; // no byte for this long (3 heartbeats): reconnect
  const TOKEN_KEY = 'leasesvc.token';
  const MAX_TERMS = 50; // terms kept per lease

  const $ = (id) => document.getElementById(id);
  const leases = new Map(); // name → entry
  let anchor = null; // {server: ms, mono: performance.now()}
  let lastId = '';
  let ctrl = null;
  let retryTimer = 0;
  let failures = 0;
  let prefix = new URLSearchParams(location.search).get('prefix') || '';
  let dirty = true;
  let gen = 0; // connection generation: a stale loop stops

  // ---- time ----
  const ms = (s) => (s ? Date.parse(s) : NaN);
  function serverNow() {
    return anchor ? anchor.server + (performance.now() - anchor.mono) : NaN;
  }
  function seeServerTime(t) {
    if (!Number.isFinite(t)) return;
    if (!anchor || t > serverNow()) anchor = { server: t, mono: performance.now() };
  }
  function dur(d) {
    if (!Number.isFinite(d)) return '–';
    d = Math.max(0, d);
    if (d < 10_000) return (d / 1000).toFixed(1) + ' s';
    const s = Math.round(d / 1000);
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' m ' + String(s % 60).padStart(2, '0') + ' s';
    const h = Math.floor(m / 60);
    return h + ' h ' + String(m % 60).padStart(2, '0') + ' m';
  }
  // win shows a session's heartbeat window (200 ms … 60 s) as it was set:
  // "300 ms", "1 s", "1.5 s".
  function win(w) {
    if (!(w > 0)) return '';
    return w < 1000 ? Math.round(w) + ' ms' : String(Math.round(w / 100) / 10) + ' s';
  }
  const clockFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  const clock = (t) => (Number.isFinite(t) ? clockFmt.format(new Date(t)) : '?');

  // ---- model ----
  // rank orders the events of one token as the service does: the start of
  // a holding before its end.
  const rank = (type, l) => (type === 'acquired' || (type === 'snapshot' && l.held) ? 0 : 1);
  function newer(a, b) {
    if (!a) return true;
    if (a.token !== b.token) return b.token > a.token;
    return a.rank < b.rank;
  }
  function endedHow(l) {
    if (l.revokeReason) return 'revoked';
    const renew = ms(l.renewTime), exp = ms(l.expireTime);
    return exp < renew + l.ttlMs ? 'released' : 'expired';
  }
  function entry(name) {
    let e = leases.get(name);
    if (!e) {
      e = { name, lease: null, pos: null, recv: 0, terms: new Map() };
      leases.set(name, e);
    }
    return e;
  }
  function term(e, token) {
    let t = e.terms.get(token);
    if (!t) {
      t = { token, holder: '', start: NaN, end: NaN, exp: NaN, how: '' };
      e.terms.set(token, t);
      if (e.terms.size > MAX_TERMS) e.terms.delete(Math.min(...e.terms.keys()));
    }
    return t;
  }
  function endTerm(t, at, how) {
    if (!Number.isFinite(t.end) || !t.how) {
      t.end = at;
      t.how = how;
    }
  }

  // The succession members a lease shows while they apply (each absent
  // otherwise); a refresh event carries all of them that apply.
  const SUCCESSION = ['priority', 'reservedFor', 'reservedUntil', 'yieldRequested', 'yieldTo', 'candidates', 'bestCandidatePriority', 'session', 'sessionWindowMs'];

  // refresh takes a refresh event's leases: the time left and succession
  // of holdings the page already has (same token and state). A lease whose
  // holding changed comes as an event or a snapshot instead.
  function refresh(data) {
    if (!data || !Array.isArray(data.leases)) return;
    const mono = performance.now();
    for (const r of data.leases) {
      const e = r && leases.get(r.name);
      if (!e || !e.lease || r.fencingToken !== e.lease.fencingToken || r.held !== (e.pos.rank === 0)) continue;
      const l = { ...e.lease, holder: r.holder, held: r.held, remainingMs: r.remainingMs, ttlMs: r.ttlMs };
      for (const k of SUCCESSION) {
        if (r[k] === undefined) delete l[k]; else l[k] = r[k];
      }
      const now = serverNow();
      if (r.held && Number.isFinite(now)) {
        // The expiry as the page's estimate of server time puts it; server
        // times only, no browser clock.
        l.expireTime = new Date(now + r.remainingMs).toISOString();
        const t = e.terms.get(r.fencingToken);
        if (t) t.exp = now + r.remainingMs;
      }
      e.lease = l;
      e.recv = mono;
    }
    changed();
  }

  // apply takes one event of the stream: snapshot (a lease's state), a
  // change (acquired, released, expired, revoked), deleted (the row goes),
  // or history (a change from before the page opened: it fills the
  // timeline only).
  let frame = 0;
  function changed() {
    dirty = true;
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; tick(); });
  }

  // endName names the end of a holding as the event says it: a release
  // because the holding's session died (no heartbeat for its window,
  // docs/contract.md §14) is told apart from the holder's own release.
  const endName = (type, data) => (type === 'released' && data.reason === 'session_expired' ? 'session expired' : type);

  function apply(type, data) {
    const l = type === 'snapshot' ? data : data.lease;
    if (!l || !l.name) return;
    if (type === 'history' && data.type === 'deleted') return;
    const e = entry(l.name);
    if (type === 'deleted') { // docs/contract.md §15: the row goes, until a new holding
      if (!e.pos || e.pos.token <= l.fencingToken) {
        e.pos = { token: l.fencingToken, rank: 2 };
        e.lease = null;
        e.terms.clear();
      }
      changed();
      return;
    }
    if (type !== 'history' && e.pos && e.pos.rank === 2 && l.fencingToken <= e.pos.token) return; // of a deleted lease
    const t = term(e, l.fencingToken);
    t.holder = l.holder;
    t.principal = l.principal || '';
    if (Number.isFinite(ms(l.acquireTime))) t.start = ms(l.acquireTime);
    // The latest expiry known for this holding: renewals are not events,
    // so for a holding that ran out unseen it is where the term is drawn to.
    const exp = ms(l.expireTime);
    if (Number.isFinite(exp) && !(exp <= t.exp)) t.exp = exp;
    if (type === 'snapshot') {
      if (!l.held) endTerm(t, ms(l.expireTime), endedHow(l));
      else { t.end = NaN; t.how = ''; }
    } else if (type === 'acquired' || (type === 'history' && data.type === 'acquired')) {
      if (l.fencingToken > 1 && data.previousHolder !== undefined) {
        const p = term(e, l.fencingToken - 1);
        if (!p.holder) p.holder = data.previousHolder;
        const at = ms(l.acquireTime);
        endTerm(p, data.previousExpired && p.exp < at ? p.exp : at, data.previousExpired ? 'expired' : 'released');
      }
    } else {
      const how = endName(type === 'history' ? data.type : type, data);
      const tt = e.terms.get(l.fencingToken);
      if (tt) { tt.end = NaN; tt.how = ''; }
      endTerm(t, ms(l.expireTime), how);
      if (how === 'revoked') t.reason = data.reason || l.revokeReason || '';
      // A snapshot cannot tell a session's death from a release (both end
      // the holding early); the recent event of the same holding can.
      if (type === 'history' && how === 'session expired' && e.lease && !e.lease.held &&
          e.lease.fencingToken === l.fencingToken && e.how === 'released') e.how = how;
    }
    if (type !== 'history') {
      const pos = { token: l.fencingToken, rank: rank(type, l) };
      if (newer(e.pos, pos) || !e.lease) {
        e.pos = pos;
        e.lease = l;
        e.recv = performance.now();
        e.how = type === 'snapshot' ? (l.held ? '' : endedHow(l)) : type === 'acquired' ? '' : endName(type, data);
      }
      seeServerTime(type === 'snapshot' ? ms(l.serverTime) : ms(data.eventTime));
    }
    changed();
  }

  // ---- stream ----
  function setConn(state, text) {
    const c = $('conn');
    c.dataset.state = state;
    $('conn-text').textContent = text;
  }
  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
  }
  function showAuth(why) {
    $('auth').hidden = false;
    $('main').classList.add('locked');
    if (why) $('auth-why').textContent = why;
    $('token').focus();
  }
  function hideAuth() {
    $('auth').hidden = true;
    $('main').classList.remove('locked');
  }
  function retry(after) {
    clearTimeout(retryTimer);
    const base = Math.min(10_000, 250 * 2 ** Math.min(failures, 6));
    const d = Math.max(after || 0, base / 2 + Math.random() * base / 2);
    failures++;
    setConn('retry', 'reconnecting in ' + dur(d));
    retryTimer = setTimeout(connect, d);
  }

  async function connect() {
    clearTimeout(retryTimer);
    if (ctrl) ctrl.abort();
    const my = ++gen;
    ctrl = new AbortController();
    const signal = ctrl.signal;
    const headers = { Accept: 'text/event-stream' };
    const tok = token();
    if (tok) headers.Authorization = 'Bearer ' + tok;
    if (lastId) headers['Last-Event-ID'] = lastId;
    const url = new URL('../v1/leases:watch', location.href);
    url.searchParams.set('prefix', prefix);
    url.searchParams.set('refresh', 'true');
    if (!lastId) url.searchParams.set('history', 'true');
    setConn('connecting', 'connecting…');
    let resp;
    try {
      resp = await fetch(url, { headers, signal, cache: 'no-store' });
    } catch (err) {
      if (my === gen) retry();
      return;
    }
    if (my !== gen) return;
    if (resp.status === 401) {
      setConn('auth', 'sign-in needed');
      showAuth(tok ? 'The service refused this token. Enter another one.' : undefined);
      return;
    }
    if (resp.status === 403 || resp.status === 400) {
      let detail = '';
      try { detail = (await resp.json()).detail || ''; } catch { /* not a problem document */ }
      setConn('denied', resp.status === 403 ? 'not allowed' : 'bad request');
      const d = $('denied');
      d.hidden = false;
      d.textContent = (resp.status === 403
        ? 'This token may not read any lease under “' + prefix + '”.'
        : 'The service refused the request.') + (detail ? ' (' + detail + ')' : '');
      if (resp.status === 403) showAuth('This token may not read leases under this prefix. Enter another one, or change the prefix.');
      return;
    }
    if (!resp.ok || !resp.body) {
      retry(Number(resp.headers.get('Retry-After')) * 1000 || 0);
      return;
    }
    hideAuth();
    $('denied').hidden = true;
    setConn('live', 'live');
    await read(resp.body, my);
    if (my === gen) retry(); // the stream ended or went silent: resume after the last id
  }

  async function read(body, my) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let ev = { id: null, type: '', data: '' };
    let idle = setTimeout(() => ctrl && ctrl.abort(), IDLE_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || my !== gen) break;
        clearTimeout(idle);
        idle = setTimeout(() => ctrl && ctrl.abort(), IDLE_MS);
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).replace(/\r$/, '');
          buf = buf.slice(i + 1);
          if (line === '') {
            if (ev.type) dispatch(ev);
            ev = { id: null, type: '', data: '' };
          } else if (line.startsWith(':')) {
            // heartbeat or comment
          } else {
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            const val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
            if (field === 'event') ev.type = val;
            else if (field === 'data') ev.data += (ev.data ? '\n' : '') + val;
            else if (field === 'id') ev.id = val;
          }
        }
      }
    } catch {
      // aborted or the connection dropped: the caller reconnects
    } finally {
      clearTimeout(idle);
    }
  }

  function dispatch(ev) {
    if (ev.id !== null && ev.id !== '') lastId = ev.id;
    failures = 0;
    let data;
    try { data = JSON.parse(ev.data); } catch { return; }
    if (ev.type === 'refresh') refresh(data);
    else apply(ev.type, data);
  }

  // ---- view ----
  const tpl = $('row-tpl');
  const rowsEl = $('rows');
  const rows = new Map(); // name → element

  // Holders get hues from a palette that keeps clear of the gap colours
  // (amber, red), chosen by a hash of the holder's name.
  const HUES = [214, 262, 178, 318, 238, 198, 290, 24, 150];
  function hue(s) {
    let h = 0;
    for (const ch of s) h = (h * 31 + ch.codePointAt(0)) >>> 0;
    return HUES[h % HUES.length];
  }

  function rowFor(name) {
    let r = rows.get(name);
    if (!r) {
      r = tpl.content.firstElementChild.cloneNode(true);
      r.dataset.name = name;
      r.querySelector('.name').textContent = name;
      rows.set(name, r);
    }
    return r;
  }

  function render() {
    const now = serverNow();
    const mono = performance.now();
    // Led leases first, then the others, each in name order.
    const led = (e) => e.lease.held && e.lease.remainingMs - (mono - e.recv) > 0;
    const names = [...leases.keys()].filter((n) => leases.get(n).lease)
      .sort((a, b) => (led(leases.get(b)) - led(leases.get(a))) || (a < b ? -1 : a > b ? 1 : 0));
    let held = 0, free = 0, long = 0;
    const frag = [];
    for (const name of names) {
      const e = leases.get(name);
      const l = e.lease;
      const r = rowFor(name);
      const left = l.held ? l.remainingMs - (mono - e.recv) : 0;
      const isHeld = led(e); // as the order has it
      const freeFor = isHeld ? 0 : now - ms(l.expireTime);
      if (isHeld) held++; else free++;
      const isLong = !isHeld && freeFor > LONG_GAP_MS;
      if (isLong) long++;
      r.dataset.held = String(isHeld);
      r.dataset.holder = l.holder;
      r.dataset.token = String(l.fencingToken);
      r.classList.toggle('is-held', isHeld);
      r.classList.toggle('is-free', !isHeld);
      r.classList.toggle('is-long', isLong);

      const how = l.held && left <= 0 ? 'expiring' : e.how || (isHeld ? '' : endedHow(l));
      const st = r.querySelector('.state');
      st.textContent = isHeld ? 'led' : how === 'expiring' ? 'expiring' : 'free';
      st.title = isHeld ? 'held since ' + clock(ms(l.acquireTime)) : how ? 'last holding ' + how : '';
      const h = r.querySelector('.holder');
      h.textContent = l.holder;
      const howEl = r.querySelector('.how');
      howEl.textContent = isHeld ? 'since ' + clock(ms(l.acquireTime))
        : how === 'revoked' ? 'last holder · revoked' + (l.revokedBy ? ' by ' + l.revokedBy : '')
          : how === 'expiring' ? 'last holder · ran out' : 'last holder · ' + (how || 'ended');
      howEl.title = howEl.textContent; // the whole of it where the column cuts it short
      h.title = l.holder + (l.principal ? ' · principal ' + l.principal : '');
      h.style.setProperty('--h', hue(l.holder));
      r.querySelector('.token').textContent = String(l.fencingToken);

      badges(r, l, now, isHeld);

      // A holding held through a session has no end to count down to: it
      // lasts while its agent heartbeats and ends within the session's
      // window of the last heartbeat. Its expiry is the backend record's
      // long TTL, which the service renews; that countdown goes in the
      // tooltip, as what would happen only if the service stopped renewing.
      const sess = isHeld && !!l.session;
      const w = sess ? l.sessionWindowMs : 0;
      r.classList.toggle('is-session', sess);
      r.dataset.leftMs = String(isHeld ? Math.round(left) : 0);
      r.dataset.windowMs = String(w || 0);
      const leftEl = r.querySelector('.left');
      leftEl.textContent = sess ? 'while alive' : isHeld ? dur(left) : Number.isFinite(freeFor) ? 'free ' + dur(freeFor) : '–';
      leftEl.title = sess ? 'led while its agent heartbeats; freed within ' + (win(w) || 'its window') + ' of the last heartbeat if the agent stops' : '';
      r.querySelector('.fill').style.width = sess ? '100%' : isHeld ? Math.min(100, (100 * left) / l.ttlMs).toFixed(1) + '%' : '0%';
      r.querySelector('.meter').title = sess
        ? 'session window ' + (win(w) || '?') + '. The service renews the backend record (ttl ' + dur(l.ttlMs) + ', renewed ' + clock(ms(l.renewTime)) +
          '); it would run out in ' + dur(left) + ' only if the service stopped renewing it'
        : isHeld ? 'ttl ' + dur(l.ttlMs) + ', renewed ' + clock(ms(l.renewTime)) : '';

      timeline(r, e, now, isHeld);
      frag.push(r);
    }
    // Keep the rows in that order without rebuilding them.
    frag.forEach((r, i) => {
      if (rowsEl.children[i] !== r) rowsEl.insertBefore(r, rowsEl.children[i] || null);
    });
    while (rowsEl.children.length > frag.length) rowsEl.lastElementChild.remove();
    $('n-leases').textContent = names.length;
    $('n-held').textContent = held;
    $('n-free').textContent = free;
    $('n-long').textContent = long;
    $('n-long').parentElement.classList.toggle('on', long > 0);
    $('empty').hidden = names.length > 0 || $('conn').dataset.state !== 'live';
  }

  // badges shows who may lead next and how the holding is held: its
  // priority, a session's window, a yield asked of it, the reservation of a
  // free lease (for whom, for how much longer), the waiting candidates.
  function badges(r, l, now, isHeld) {
    const out = [];
    if (l.priority) out.push(['prio', 'priority ' + l.priority, 'acquired with priority ' + l.priority]);
    if (l.session && isHeld) {
      const w = win(l.sessionWindowMs);
      out.push(['sess', 'session' + (w ? ', window ' + w : ''),
        'held through a session: freed within ' + (w || 'its heartbeat window') + ' of its agent\'s last heartbeat if the agent stops, ' +
        'while the service keeps the lease renewed on the backend']);
    }
    if (l.yieldRequested && isHeld) {
      out.push(['yield', 'yield → ' + (l.yieldTo || '?'), 'a candidate of higher priority (' + (l.yieldTo || '?') + ') asks this holding to step down']);
    }
    if (l.reservedFor && !isHeld) {
      const until = ms(l.reservedUntil) - now;
      out.push(['resv', 'next: ' + l.reservedFor + (Number.isFinite(until) && until > 0 ? ' · ' + Math.ceil(until / 1000) + ' s' : ''),
        'reserved for ' + l.reservedFor + ' until ' + clock(ms(l.reservedUntil)) + ': only its acquire succeeds']);
    }
    if (l.candidates) {
      const best = l.bestCandidatePriority;
      out.push(['wait', l.candidates + ' waiting' + (best !== undefined && best !== null ? ' · best ' + best : ''),
        l.candidates + (l.candidates === 1 ? ' candidate waits' : ' candidates wait') + (best !== undefined && best !== null ? '; the best has priority ' + best : '')]);
    }
    r.dataset.candidates = String(l.candidates || 0);
    r.dataset.next = (!isHeld && l.reservedFor) || (isHeld && l.yieldTo) || '';
    r.dataset.session = String(!!l.session);
    const b = r.querySelector('.badges');
    const key = JSON.stringify(out);
    if (b.dataset.key === key) return;
    b.dataset.key = key;
    b.replaceChildren(...out.map(([cls, text, title]) => {
      const s = document.createElement('span');
      s.className = 'badge ' + cls;
      s.textContent = text;
      s.title = title;
      return s;
    }));
  }

  // timeline draws the lease's terms over the last WINDOW_MS of server
  // time, the gaps between them, and what is not known (before the oldest
  // term the page has seen).
  function timeline(r, e, now, isHeld) {
    const el = r.querySelector('.timeline');
    if (!Number.isFinite(now)) return;
    const from = now - WINDOW_MS;
    const x = (t) => Math.max(0, Math.min(100, ((t - from) / WINDOW_MS) * 100));
    const terms = [...e.terms.values()].filter((t) => Number.isFinite(t.start)).sort((a, b) => a.token - b.token);
    const segs = [];
    const items = [];
    const add = (cls, a, b, label, holder) => {
      if (b <= from || a >= now || b <= a) return;
      segs.push({ cls, l: x(a), w: Math.max(0.4, x(b) - x(a)), label, holder });
    };
    if (terms.length) add('unknown', from, terms[0].start, 'before the oldest term this page knows');
    for (let i = 0; i < terms.length; i++) {
      const t = terms[i];
      const end = Number.isFinite(t.end) ? t.end : isHeld || i < terms.length - 1 ? now : ms(e.lease.expireTime);
      const open = !Number.isFinite(t.end) && i === terms.length - 1 && isHeld;
      const label = '#' + t.token + ' ' + t.holder + ' · ' + clock(t.start) + ' → ' + (open ? 'now' : clock(end)) +
        ' (' + dur(end - t.start) + ')' + (t.how ? ' · ' + t.how : open ? ' · leading' : '');
      add('term' + (open ? ' open' : ''), t.start, end, label, t.holder);
      items.push({ cls: 'term', text: label, how: t.how || (open ? 'leading' : '') });
      const next = terms[i + 1];
      const gapEnd = next ? next.start : isHeld ? NaN : now;
      if (Number.isFinite(gapEnd) && gapEnd - end > 0) {
        const long = gapEnd - end > LONG_GAP_MS;
        const gl = 'no leader ' + clock(end) + ' → ' + (next ? clock(gapEnd) : 'now') + ' (' + dur(gapEnd - end) + ')';
        add(long ? 'gap long' : 'gap', end, gapEnd, gl);
        items.push({ cls: long ? 'gap long' : 'gap', text: gl });
      }
    }
    const key = segs.map((s) => s.cls + s.l.toFixed(1) + s.w.toFixed(1)).join('|');
    if (el.dataset.key !== key) {
      el.dataset.key = key;
      el.replaceChildren(...segs.map((s) => {
        const d = document.createElement('span');
        d.className = 'seg ' + s.cls;
        d.style.left = s.l + '%';
        d.style.width = s.w + '%';
        d.title = s.label;
        if (s.holder !== undefined) d.style.setProperty('--h', hue(s.holder));
        return d;
      }));
      el.setAttribute('aria-label', items.length ? items.map((i) => i.text).join('; ') : 'no terms seen');
    }
    const ol = r.querySelector('.terms ol');
    const lkey = items.map((i) => i.text).join('|');
    if (ol.dataset.key !== lkey) {
      ol.dataset.key = lkey;
      ol.replaceChildren(...items.slice().reverse().map((i) => {
        const li = document.createElement('li');
        li.className = i.cls;
        li.textContent = i.text;
        return li;
      }));
      r.querySelector('.terms summary').textContent = terms.length + (terms.length === 1 ? ' term' : ' terms');
    }
  }

  function tick() {
    render();
    dirty = false;
  }

  // ---- wiring ----
  $('prefix').value = prefix;
  $('prefix-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    prefix = $('prefix').value.trim();
    const u = new URL(location.href);
    if (prefix) u.searchParams.set('prefix', prefix); else u.searchParams.delete('prefix');
    history.replaceState(null, '', u);
    leases.clear();
    rows.clear();
    rowsEl.replaceChildren();
    lastId = '';
    failures = 0;
    $('denied').hidden = true;
    connect();
  });
  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = $('token').value.trim();
    try {
      if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    } catch { /* storage off: the token lives until the next reconnect */ }
    $('token').value = '';
    $('denied').hidden = true;
    failures = 0;
    connect();
  });
  document.title = 'leasesvc · ' + (prefix || 'all leases');
  setInterval(() => { if (dirty || leases.size) tick(); }, 250);
  connect();
})();
