// The SyncServer dashboard: reads the GET endpoints with a bearer token and
// follows each protocol's event stream, drawing every enactment as a live
// sequence chart. Read-only: it sends GET requests only.
//
// Safe by construction: every value from the server (bindings above all: any
// agent may bind any text) reaches the page through textContent or
// createElement, never as HTML. The page's Content-Security-Policy allows no
// inline script and no other origin besides.
'use strict';

(() => {
  const TOKEN_KEY = 'strabo-dashboard-token';
  const POLL_MS = 2000;
  const MAX_ENACTMENTS = 200; // per protocol, the newest kept on the page
  const MAX_STEPS = 300; // per enactment, the newest kept in its chart
  // This origin, always: a path starting with '//' (which a front proxy may
  // still map to /ui) would otherwise make a URL of another host.
  const base = location.origin + location.pathname.replace(/ui\/?$/, '');

  let token = sessionStorage.getItem(TOKEN_KEY);
  let run = 0; // bumped on every (re)start: older loops and streams stop
  let controllers = [];

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function shown(value) {
    return typeof value === 'string' ? value : JSON.stringify(value);
  }

  function status(text, bad) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('bad', Boolean(bad));
  }

  class Unauthorized extends Error {}

  async function get(path, signal) {
    const res = await fetch(base + path, {
      headers: { Authorization: 'Bearer ' + token, Accept: 'application/json' },
      cache: 'no-store',
      signal,
    });
    let body = null;
    try {
      body = await res.json();
    } catch (e) {
      body = null;
    }
    if (res.status === 401) throw new Unauthorized(body && body.error ? body.error.message : 'unauthorized');
    if (!res.ok) throw new Error(body && body.error ? body.error.message : res.status + ' ' + res.statusText);
    return body;
  }

  const enc = encodeURIComponent;

  // Sign in and out -------------------------------------------------------------

  function askToken(message) {
    stop();
    token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $('board').hidden = true;
    $('mas-pick').hidden = true;
    $('sign-out').hidden = true;
    $('who').textContent = '';
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    status('');
    $('token').focus();
  }

  function stop() {
    run += 1;
    for (const c of controllers) c.abort();
    controllers = [];
  }

  async function start() {
    $('login').hidden = true;
    $('sign-out').hidden = false;
    let listing;
    try {
      listing = await get('mas');
    } catch (e) {
      askToken(e instanceof Unauthorized ? 'This token is not valid here.' : e.message);
      return;
    }
    const select = $('mas-select');
    select.replaceChildren(...listing.mas.map((name) => el('option', null, name)));
    $('mas-pick').hidden = listing.mas.length < 2;
    const wanted = new URLSearchParams(location.hash.slice(1)).get('mas');
    if (wanted && listing.mas.includes(wanted)) select.value = wanted;
    openMas(select.value);
  }

  // One MAS ---------------------------------------------------------------------

  async function openMas(mas) {
    stop();
    const mine = run;
    $('board').hidden = false;
    $('protocols').replaceChildren();
    let info;
    try {
      info = await get('mas/' + enc(mas));
    } catch (e) {
      if (e instanceof Unauthorized) askToken('This token is not valid for ' + mas + '.');
      else status(e.message, true);
      return;
    }
    $('who').textContent = 'MAS ' + info.mas + ' as ' + info.agent;
    for (const name of info.protocols) {
      if (!(name in info.roles)) continue; // an agent reads the protocols it plays
      const view = new ProtocolView(mas, name);
      $('protocols').append(view.root);
      view.begin(mine);
    }
    poll(mas, mine);
  }

  async function poll(mas, mine) {
    while (mine === run) {
      try {
        const [agents, stats, refusals] = await Promise.all([
          get('mas/' + enc(mas) + '/agents'),
          get('mas/' + enc(mas) + '/stats'),
          get('mas/' + enc(mas) + '/refusals'),
        ]);
        if (mine !== run) return;
        drawAgents(agents.agents);
        drawFigures(stats);
        drawRefusals(refusals.refusals);
      } catch (e) {
        if (e instanceof Unauthorized) {
          askToken('The server no longer accepts this token.');
          return;
        }
        status(e.message, true);
      }
      await pause(POLL_MS);
    }
  }

  function pause(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  function row(cells) {
    const tr = el('tr');
    for (const c of cells) tr.append(c instanceof Node ? c : el('td', null, c));
    return tr;
  }

  // A time as HH:MM:SS (UTC), the whole date in its tooltip.
  function when(iso) {
    const td = el('td', 'time', iso ? iso.slice(11, 19) : '');
    if (iso) td.title = iso;
    return td;
  }

  function drawAgents(agents) {
    const body = $('agents').tBodies[0];
    body.replaceChildren(
      ...agents.map((a) => {
        const roles = Object.entries(a.roles).map(([p, r]) => p + ': ' + r.join(', ')).join('; ');
        const on = el('td', a.connected ? 'on' : 'off', a.connected ? 'connected' : 'not connected');
        const tr = row([a.name, roles, on, when(a.connected_since), when(a.last_attempt)]);
        tr.dataset.agent = a.name;
        return tr;
      }),
    );
  }

  function drawFigures(s) {
    const ms = (v) => (v === null || v === undefined ? '–' : v + ' ms');
    const figures = [
      ['attempts / s', s.attempts_per_second],
      ['refused / s', s.refused_per_second],
      ['latency (mean)', ms(s.latency_ms.mean)],
      ['latency (max)', ms(s.latency_ms.max)],
      ['event streams', s.streams],
      ['agents connected', s.agents_connected + ' of ' + s.agents],
      ['attempts', s.attempts],
      ['refused', s.refused],
    ];
    const dl = $('figures');
    dl.replaceChildren();
    for (const [name, value] of figures) dl.append(el('dt', null, name), el('dd', null, value));
    dl.title = 'over the last ' + s.window_seconds + ' s; totals since ' + s.since;
  }

  function drawRefusals(refusals) {
    const body = $('refusals').tBodies[0];
    if (!refusals.length) {
      const td = el('td', 'none', 'none');
      td.colSpan = 6;
      body.replaceChildren(row([td]));
      return;
    }
    body.replaceChildren(
      ...refusals.map((r) =>
        row([when(r.time), r.agent, r.protocol, el('td', 'rule', r.rule), r.action || '', r.message]),
      ),
    );
  }

  // One protocol: its enactments, fed by its event stream ------------------------

  class ProtocolView {
    constructor(mas, name) {
      this.mas = mas;
      this.name = name;
      this.path = 'mas/' + enc(mas) + '/protocols/' + enc(name);
      this.enactments = new Map(); // JSON of the root keys' values -> EnactmentView
      this.root = el('section', 'protocol panel');
      this.root.dataset.protocol = name;
      this.title = el('h2', null, name);
      this.live = el('span', 'live', 'connecting');
      this.summary = el('p', 'summary');
      this.list = el('div', 'enactments');
      this.title.append(' ', this.live);
      this.root.append(this.title, this.summary, this.list);
      this.refreshing = null;
    }

    async begin(mine) {
      try {
        this.protocol = await get(this.path);
      } catch (e) {
        this.summary.textContent = e.message;
        return;
      }
      this.roles = this.protocol.roles;
      this.summary.textContent =
        'roles ' + this.roles.join(', ') + ' · keys ' + this.protocol.root_keys.join(', ');
      this.follow(mine);
      this.refresh(mine);
    }

    key(values) {
      return JSON.stringify(this.protocol.root_keys.map((k) => (k in values ? values[k] : null)));
    }

    enactment(keys) {
      const id = this.key(keys);
      let view = this.enactments.get(id);
      if (!view) {
        view = new EnactmentView(this, keys, id);
        this.enactments.set(id, view);
        this.list.prepend(view.root); // newest first
        if (this.enactments.size > MAX_ENACTMENTS) {
          const [oldest] = this.enactments.keys();
          this.enactments.get(oldest).root.remove();
          this.enactments.delete(oldest);
        }
      }
      return view;
    }

    apply(batch) {
      const touched = new Set();
      for (const entry of batch.instances) {
        const view = this.enactment(entry.bindings);
        view.step(batch.seq, entry);
        touched.add(view);
      }
      this.root.dataset.seq = String(batch.seq);
      for (const view of touched) view.changed();
      this.soon();
    }

    // Completion is the server's to say: read the enactments' page again
    // (once per burst of batches).
    soon() {
      if (this.refreshing) return;
      const mine = run;
      this.refreshing = setTimeout(() => {
        this.refreshing = null;
        this.refresh(mine);
      }, 300);
    }

    async refresh(mine) {
      try {
        let page = await get(this.path + '/enactments?limit=1');
        const offset = Math.max(0, page.total - MAX_ENACTMENTS);
        page = await get(this.path + '/enactments?offset=' + offset + '&limit=' + MAX_ENACTMENTS);
        if (mine !== run) return;
        for (const item of page.enactments) {
          const view = this.enactments.get(this.key(item.keys));
          if (view) view.complete(item.complete);
        }
        const done = page.enactments.filter((e) => e.complete).length;
        this.summary.textContent =
          'roles ' + this.roles.join(', ') + ' · ' + page.total + ' enactments' +
          ' (' + done + ' of the last ' + page.enactments.length + ' complete)';
      } catch (e) {
        if (mine === run) this.summary.textContent = e.message;
      }
    }

    // The event stream, read with fetch: EventSource cannot send a token.
    async follow(mine) {
      let after = 0;
      let delay = 500;
      while (mine === run) {
        const controller = new AbortController();
        controllers.push(controller);
        try {
          const res = await fetch(base + this.path + '/events?after=' + after, {
            headers: { Authorization: 'Bearer ' + token, Accept: 'text/event-stream' },
            cache: 'no-store',
            signal: controller.signal,
          });
          if (res.status === 401) {
            askToken('The server no longer accepts this token.');
            return;
          }
          if (!res.ok) throw new Error('event stream: ' + res.status);
          this.setLive(true);
          delay = 500;
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buffer = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done || mine !== run) break;
            buffer += value.replace(/\r\n?/g, '\n');
            let cut;
            while ((cut = buffer.indexOf('\n\n')) >= 0) {
              const frame = parseFrame(buffer.slice(0, cut));
              buffer = buffer.slice(cut + 2);
              if (frame.event === 'error') {
                const body = JSON.parse(frame.data);
                if (body.error && typeof body.error.after === 'number') after = body.error.after;
              } else if (frame.data) {
                const batch = JSON.parse(frame.data);
                if (batch.seq > after) {
                  this.apply(batch);
                  after = batch.seq;
                }
              }
            }
          }
        } catch (e) {
          if (controller.signal.aborted || mine !== run) return;
        }
        this.setLive(false);
        await pause(delay);
        delay = Math.min(delay * 2, 10000);
      }
    }

    setLive(on) {
      this.live.textContent = on ? 'live' : 'reconnecting';
      this.live.classList.toggle('on', on);
    }
  }

  function parseFrame(text) {
    const frame = { id: null, event: 'message', data: '' };
    const data = [];
    for (const line of text.split('\n')) {
      if (line.startsWith(':')) continue; // a comment (the heartbeat)
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') frame.event = value;
      else if (field === 'id') frame.id = value;
    }
    frame.data = data.join('\n');
    return frame;
  }

  // One enactment as a sequence chart: a lifeline per role, an arrow per action
  // from its actor's lifeline, its bindings under it.

  class EnactmentView {
    constructor(protocol, keys, id) {
      this.protocol = protocol;
      this.keys = {};
      for (const k of protocol.protocol.root_keys) this.keys[k] = keys[k];
      this.root = el('article', 'enactment');
      this.root.dataset.enactment = id;
      const head = el('header');
      const title = el('h3');
      for (const [k, v] of Object.entries(this.keys)) title.append(el('span', 'key', k + ' = ' + shown(v)));
      this.badge = el('span', 'badge', 'in progress');
      head.append(title, this.badge);
      this.chart = el('div', 'chart');
      this.chart.style.setProperty('--lanes', String(protocol.roles.length));
      const heads = el('div', 'lifelines');
      protocol.roles.forEach((role, i) => {
        const h = el('div', 'role', role);
        h.style.gridColumn = String(i + 1);
        heads.append(h);
      });
      this.chart.append(heads);
      this.enabled = el('details', 'enabled');
      this.enabled.append(el('summary', null, 'enabled now, for whom'), el('div', 'list'));
      this.enabled.addEventListener('toggle', () => {
        if (this.enabled.open) this.readEnabled();
      });
      this.root.append(head, this.chart, this.enabled);
      this.steps = 0;
    }

    step(seq, entry) {
      const roles = this.protocol.roles;
      const action = this.protocol.protocol.actions[entry.action];
      const from = Math.max(0, roles.indexOf(action ? action.actor : ''));
      const last = roles.length - 1;
      const to = from < last ? last : from > 0 ? 0 : from;
      const low = Math.min(from, to);
      const span = Math.abs(to - from) + 1;
      const row = el('div', 'step');
      row.dataset.seq = String(seq);
      row.dataset.action = entry.action;
      roles.forEach((_, i) => {
        const lane = el('div', 'lane');
        lane.style.gridColumn = String(i + 1);
        row.append(lane);
      });
      const arrow = el('div', 'arrow ' + (to > from ? 'right' : to < from ? 'left' : 'self'));
      arrow.style.gridColumn = low + 1 + ' / span ' + span;
      const line = el('div', 'line');
      const inset = 100 / (2 * span) + '%';
      line.style.left = inset;
      line.style.right = inset;
      arrow.append(line);
      const label = el('div', 'label');
      label.style.gridColumn = low + 1 + ' / span ' + span;
      label.append(el('span', 'action', entry.action), el('span', 'performer', 'by ' + entry.performer + ' · #' + seq));
      const bindings = el('dl', 'bindings');
      for (const [k, v] of Object.entries(entry.bindings)) {
        bindings.append(el('dt', null, k), el('dd', null, shown(v)));
      }
      label.append(bindings);
      row.append(arrow, label);
      this.chart.append(row);
      this.steps += 1;
      if (this.steps > MAX_STEPS) {
        this.chart.children[1].remove();
        this.steps -= 1;
      }
    }

    changed() {
      this.root.classList.add('fresh');
      setTimeout(() => this.root.classList.remove('fresh'), 800);
      if (this.enabled.open) this.readEnabled();
    }

    complete(done) {
      this.badge.textContent = done ? 'complete' : 'in progress';
      this.badge.classList.toggle('done', done);
      this.root.dataset.complete = String(done);
    }

    async readEnabled() {
      const query = Object.entries(this.keys).map(([k, v]) => enc(k) + '=' + enc(String(v))).join('&');
      const list = this.enabled.querySelector('.list');
      try {
        // limit bounds the instances (not shown here) and each role's list.
        const e = await get(this.protocol.path + '/enactment?' + query + '&limit=20');
        this.complete(e.complete);
        list.replaceChildren();
        for (const [role, actions] of Object.entries(e.enabled)) {
          const p = el('p', null);
          p.append(el('strong', null, role + ': '));
          if (!actions.length) p.append(el('span', 'none', 'nothing'));
          for (const a of actions) {
            const todo = a.to_bind.length ? ' (binds ' + a.to_bind.join(', ') + ')' : '';
            p.append(el('span', 'can', a.action + todo));
          }
          if (e.enabled_total[role] > actions.length) p.append(el('span', 'none', '…'));
          list.append(p);
        }
      } catch (err) {
        list.replaceChildren(el('p', 'error', err.message));
      }
    }
  }

  // Wiring ----------------------------------------------------------------------

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (event) => {
      event.preventDefault();
      token = $('token').value.trim();
      $('token').value = '';
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      start();
    });
    $('sign-out').addEventListener('click', () => askToken(''));
    $('mas-select').addEventListener('change', (event) => {
      location.hash = 'mas=' + enc(event.target.value);
      openMas(event.target.value);
    });
    if (token) start();
    else askToken('');
  });
})();
