// director status page: polls /api/v1/status with the token from the URL fragment
// (#token=...), kept in sessionStorage, and renders the regions, the tenants, the map and
// the samples.
"use strict";
(function () {
  const POLL_MS = 1500;
  const KEY = "director.token";
  const SVG = "http://www.w3.org/2000/svg";
  let timer = null;

  function takeToken() {
    const match = /(?:^|&)token=([^&]+)/.exec(location.hash.replace(/^#/, ""));
    if (match) {
      sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);  // out of the URL
    }
    return sessionStorage.getItem(KEY);
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  function pct(x) { return x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`; }

  function bar(fraction, kind) {
    const width = Math.max(0, Math.min(1, fraction || 0)) * 100;
    let cls = `bar ${kind}`;
    if (kind === "load" && fraction >= 1) cls += " over";
    else if (kind === "load" && fraction >= 0.85) cls += " hot";
    const inner = el("span");
    inner.style.width = `${width}%`;
    return el("span", { class: cls }, inner);
  }

  function health(region) {  // the region's own health
    if (region.healthy === false) return "down";
    if (region.healthy === null || region.healthy === undefined) return "unknown";
    return region.degraded ? "degraded" : "healthy";
  }

  function mapState(region) {  // on the map a draining region shows amber
    const state = health(region);
    return state === "healthy" && region.draining ? "degraded" : state;
  }

  function healthPill(region) {
    const state = health(region);
    const text = { down: "down", unknown: "not probed", degraded: "degraded",
                   healthy: "healthy" }[state];
    const pill = el("span", { class: `pill ${state}` }, text);
    return region.stale ? el("span", {}, pill, " ", el("span", { class: "pill stale" }, "stale"))
                        : pill;
  }

  function renderRegions(regions) {
    const body = document.querySelector("#regions tbody");
    body.replaceChildren(...regions.map((r) => {
      const gpus = r.gpus.map((g) => {
        const cls = ["gpu", g.healthy === false ? "down" : g.healthy ? "healthy" : "",
                     g.draining ? "draining" : ""].join(" ");
        const title = `${g.url} · ${g.kind || ""} · ${g.healthy === null ? "not probed" :
          g.healthy ? "healthy" : "down"}${g.draining ? " · draining" : ""}` +
          (g.utilization === null ? "" : ` · KV cache ${pct(g.utilization)}`);
        return el("span", { class: cls, title }, g.name);
      });
      const probed = r.gpus.filter((g) => g.healthy !== null).length;
      const up = r.gpus.filter((g) => g.healthy).length;
      const summary = probed ? `${up}/${r.gpus.length} up ` : "not probed ";
      return el("tr", { "data-region": r.name },
        el("td", { class: "name" }, r.name),
        el("td", {}, r.jurisdiction),
        el("td", { class: "health" }, healthPill(r)),
        el("td", { class: "drain" }, r.draining ? el("span", { class: "pill draining" }, "draining")
                                                : el("span", { class: "pill serving" }, "serving")),
        el("td", { class: "load" }, bar(r.utilization, "load"),
           el("span", { class: "value" }, pct(r.utilization))),
        el("td", { class: "share" }, bar(r.share, "share"),
           el("span", { class: "value" }, pct(r.share))),
        el("td", { class: "gpus" }, el("span", { class: "muted" }, summary),
           ...gpus),
        el("td", { class: "mono" }, r.balancer || "–"));
    }));
  }

  function count(n) {
    if (n === null || n === undefined) return "–";
    if (n >= 1e9) return `${+(n / 1e9).toFixed(1)}G`;
    if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
    if (n >= 1e4) return `${+(n / 1e3).toFixed(1)}k`;
    return String(+n.toFixed(1));
  }

  function quotaText(q) {
    if (!q) return "not declared";
    const parts = [];
    if (q.requests_per_minute) parts.push(`${count(q.requests_per_minute)} req/min`);
    if (q.input_tokens_per_minute) parts.push(`${count(q.input_tokens_per_minute)} in/min`);
    if (q.output_tokens_per_minute) parts.push(`${count(q.output_tokens_per_minute)} out/min`);
    if (q.concurrent) parts.push(`${q.concurrent} at once`);
    return parts.length ? parts.join(" · ") : "no limit";
  }

  function renderTenants(section) {
    const box = document.getElementById("tenants-section");
    const tenants = section ? section.tenants : [];
    box.hidden = !tenants.length;
    const error = document.getElementById("tenants-error");
    error.hidden = !section || section.available !== false;
    error.textContent = section && section.available === false
      ? `usage unavailable: ${section.error || "state unreachable"}` : "";
    const body = document.querySelector("#tenants tbody");
    body.replaceChildren(...tenants.map((t) => {
      const u = t.usage;
      const refused = t.throttled.over_quota;
      const limits = Object.entries(t.throttled.by_limit)
        .map(([limit, n]) => `${limit} ${count(n)}`).join(", ");
      const throttled = refused
        ? el("span", { class: "throttled", title: limits }, el("span", { class: "pill degraded" },
                                                               count(refused)),
             limits ? el("span", { class: "muted small" }, ` ${limits}`) : null)
        : el("span", { class: "muted" }, "0");
      const unavailable = t.throttled.state_unavailable
        ? el("span", { class: "muted small", title: "refused with 503: the quota state was " +
                       "down and the tenant fails closed" },
             ` · 503 ${count(t.throttled.state_unavailable)}`)
        : null;
      const tier = t.declared ? `${t.priority} · ${t.weight}` : "–";
      return el("tr", { "data-tenant": t.name },
        el("td", { class: "name" }, t.name),
        el("td", { class: "tier" }, tier),
        el("td", { class: "quota" }, quotaText(t.quota)),
        el("td", { class: "requests num" }, count(u.requests)),
        el("td", { class: "input num" }, count(u.input_tokens)),
        el("td", { class: "output num" }, count(u.output_tokens)),
        el("td", { class: "cancelled num" }, count(u.cancelled)),
        el("td", { class: "gpu-seconds num" }, u.gpu_seconds.toFixed(1)),
        el("td", { class: "throttled" }, throttled, unavailable));
    }));
  }

  function renderRollouts(rollouts) {
    const list = rollouts || [];
    document.getElementById("rollouts-section").hidden = !list.length;
    const pill = { running: "reachable", paused: "stale", completed: "reachable",
                   "rolled-back": "unreachable", aborted: "stale" };
    document.querySelector("#rollouts tbody").replaceChildren(...list.map((r) => {
      const gates = Object.entries(r.gates).map(([gate, verdict]) => `${gate} ${verdict}`)
        .join(", ");
      return el("tr", { "data-rollout": r.id },
        el("td", { class: "name" }, r.id),
        el("td", {}, r.model),
        el("td", {}, `${r.baseline} → ${r.candidate}`),
        el("td", { title: r.reason || "" },
           el("span", { class: `pill ${pill[r.status] || "stale"}` }, r.status)),
        el("td", { class: "num" }, `${r.percent} %`),
        el("td", { class: "muted small" }, gates || "–"));
    }));
  }

  function renderInstances(instances) {
    const list = instances || [];
    document.getElementById("instances-section").hidden = !list.length;
    document.querySelector("#instances tbody").replaceChildren(...list.map((i) =>
      el("tr", { "data-instance": `${i.role}/${i.name}` },
        el("td", {}, i.role),
        el("td", { class: "name" }, i.name),
        el("td", {}, i.address || "–"),
        el("td", {}, i.region || "–"),
        el("td", { class: "muted" }, `${i.host} pid ${i.pid}`),
        el("td", { class: "num" }, `${i.age_s} s ago`),
        el("td", {}, el("span", { class: `pill ${i.state === "up" ? "reachable" : "unreachable"}` },
                       i.state)))));
  }

  function renderSamples(samples) {
    const services = [...new Set(samples.map((s) => s.service))];
    const head = document.querySelector("#samples thead tr");
    head.replaceChildren(el("th", {}, "Client"), ...services.map((s) => el("th", {}, s)));
    const byLabel = new Map();
    for (const s of samples) {
      if (!byLabel.has(s.label)) byLabel.set(s.label, { subnet: s.subnet, answers: {} });
      byLabel.get(s.label).answers[s.service] = s;
    }
    const body = document.querySelector("#samples tbody");
    body.replaceChildren(...[...byLabel].map(([label, row]) => el("tr", { "data-label": label },
      el("td", {}, label, el("br"), el("code", { class: "muted" }, row.subnet)),
      ...services.map((service) => {
        const s = row.answers[service];
        if (!s) return el("td", {}, "–");
        const answer = s.regions.length ? s.regions.join(", ")
                                        : el("span", { class: "none" }, "nothing");
        const reason = s.reason !== "primary" ? el("span", { class: "reason" }, s.reason) : null;
        return el("td", { class: "answer", "data-service": service }, answer, reason);
      }))));
  }

  function renderMap(status) {
    const map = document.getElementById("map");
    const nodes = [];
    for (let lon = -150; lon <= 150; lon += 30) {
      nodes.push(svg("line", { class: "grid", x1: lon, y1: -90, x2: lon, y2: 90 }));
    }
    for (let lat = -60; lat <= 60; lat += 30) {
      nodes.push(svg("line", { class: "grid", x1: -180, y1: -lat, x2: 180, y2: -lat }));
    }
    for (const ring of window.DIRECTOR_WORLD || []) {
      nodes.push(svg("polygon", { class: "land",
                                  points: ring.map(([x, y]) => `${x},${-y}`).join(" ") }));
    }
    const regions = new Map(status.regions.map((r) => [r.name, r]));
    const firstService = status.samples.length ? status.samples[0].service : null;
    for (const s of status.samples) {
      if (s.service !== firstService || s.longitude === null) continue;
      const target = regions.get(s.regions[0]);
      if (target) {
        nodes.push(svg("line", { class: "route", x1: s.longitude, y1: -s.latitude,
                                 x2: target.longitude, y2: -target.latitude }));
      }
      nodes.push(svg("circle", { class: "client", cx: s.longitude, cy: -s.latitude, r: 1.6 }));
    }
    for (const r of status.regions) {
      const radius = 2.5 + 6 * (r.share || 0);
      const dot = svg("circle", { class: `region ${mapState(r)}`, cx: r.longitude,
                                  cy: -r.latitude, r: radius, "data-region": r.name });
      const title = svg("title", {});
      title.textContent = `${r.name}: ${health(r)}${r.draining ? ", draining" : ""}, ` +
                          `load ${pct(r.utilization)}, share ${pct(r.share)}`;
      dot.append(title);
      const label = svg("text", { class: "label", x: r.longitude + radius + 1,
                                  y: -r.latitude + 1.5 });
      label.textContent = r.name;
      nodes.push(dot, label);
    }
    map.replaceChildren(...nodes);
  }

  function render(status) {
    const p = status.policy;
    const policy = document.getElementById("policy");
    policy.title = p.name;
    policy.textContent = `${p.zone} · policy ${p.name.split("/").pop()} v${p.version}` +
      (status.dns.listen.length ? ` · DNS ${status.dns.listen.join(", ")}` : "");
    const state = document.getElementById("state");
    const reachable = status.state.reachable;
    state.className = `pill ${reachable ? (status.state.stale ? "stale" : "reachable")
                                        : "unreachable"}`;
    state.textContent = reachable ? (status.state.stale ? "state stale" : "state live")
                                  : "state unreachable: last known";
    document.getElementById("updated").textContent =
      `updated ${new Date(status.generated_at * 1000).toLocaleTimeString()} · ` +
      `snapshot ${status.state.snapshot_version}`;
    renderRegions(status.regions);
    renderTenants(status.tenants);
    renderRollouts(status.rollouts);
    renderInstances(status.instances);
    renderSamples(status.samples);
    renderMap(status);
  }

  function showLogin(message) {
    document.getElementById("login").hidden = false;
    document.getElementById("main").hidden = true;
    document.getElementById("login-error").textContent = message || "";
  }

  async function poll() {
    const token = sessionStorage.getItem(KEY);
    if (!token) { showLogin(""); return; }
    const error = document.getElementById("error");
    try {
      const resp = await fetch("/api/v1/status", {
        headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
      if (resp.status === 401 || resp.status === 403) {
        sessionStorage.removeItem(KEY);
        showLogin((await resp.json()).error || "token refused");
        return;
      }
      if (!resp.ok) throw new Error(`status ${resp.status}`);
      render(await resp.json());
      error.hidden = true;
      document.body.dataset.updated = String(Date.now());
    } catch (exc) {
      error.textContent = `cannot reach the API: ${exc.message}`;
      error.hidden = false;
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function start() {
    clearTimeout(timer);
    document.getElementById("login").hidden = true;
    document.getElementById("main").hidden = false;
    poll();
  }

  document.getElementById("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = document.getElementById("token").value.trim();
    if (value) { sessionStorage.setItem(KEY, value); start(); }
  });
  window.addEventListener("hashchange", () => { if (takeToken()) start(); });
  takeToken();
  start();
})();
