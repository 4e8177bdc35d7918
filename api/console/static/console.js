// coordd console: live updates of the leases and resources pages through
// the node's Watch (Server-Sent Events from /ui/events), and expiry
// countdowns. No dependencies.
"use strict";

(function () {
  function fmtDur(ms) {
    ms = Math.max(0, Math.round(ms));
    if (ms < 1000) return ms + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    var m = Math.floor(ms / 60000), s = Math.floor(ms / 1000) % 60;
    if (ms < 3600000) return m + "m" + (s < 10 ? "0" : "") + s + "s";
    var h = Math.floor(ms / 3600000);
    return h + "h" + (m % 60 < 10 ? "0" : "") + (m % 60) + "m";
  }

  // Countdown: each expiry cell holds the ms left when it was rendered.
  function startCountdown() {
    var t0 = Date.now();
    document.querySelectorAll("td.col-expires").forEach(function (td) {
      td.dataset.deadline = String(t0 + Number(td.dataset.expiresIn || 0));
    });
    setInterval(function () {
      var now = Date.now();
      document.querySelectorAll("td.col-expires").forEach(function (td) {
        var left = Number(td.dataset.deadline) - now;
        if (!Number(td.dataset.expiresIn)) return;
        if (left <= 0) {
          td.textContent = "—";
          var st = td.parentElement.querySelector("td.col-state");
          if (st && st.textContent === "held") { st.textContent = "expired"; st.className = "col-state state expired"; }
          td.dataset.expiresIn = "0";
        } else {
          td.textContent = fmtDur(left);
        }
      });
    }, 250);
  }

  function cell(cls, text) {
    var td = document.createElement("td");
    td.className = cls;
    td.textContent = text;
    return td;
  }

  // ms is a JSON duration ("12.250s", the API's form) in milliseconds.
  function ms(d) {
    return d ? Math.round(parseFloat(d) * 1000) : 0;
  }

  function leaseState(l, kind) {
    if (l.released) return "released";
    if (kind === "EXPIRE" || l.expired || !ms(l.expires_in)) return "expired";
    return "held";
  }

  function applyLease(e) {
    var l = e.lease;
    if (!l) return;
    var tbody = document.querySelector("#leases tbody");
    var empty = tbody.querySelector("tr.empty");
    if (empty) empty.remove();
    var row = null;
    tbody.querySelectorAll("tr[data-key]").forEach(function (tr) { if (tr.dataset.key === e.key) row = tr; });
    if (!row) {
      row = document.createElement("tr");
      row.dataset.key = e.key;
      ["name", "state", "owner", "identity", "generation", "expires", "ttl", "held", "renewals", "value"].forEach(function (c) {
        row.appendChild(cell("col-" + c, ""));
      });
      tbody.insertBefore(row, tbody.firstChild);
    }
    var st = leaseState(l, e.kind);
    var exp = st === "held" ? ms(l.expires_in) : 0;
    row.querySelector(".col-name").textContent = l.name;
    var s = row.querySelector(".col-state");
    s.textContent = st;
    s.className = "col-state state " + st;
    row.querySelector(".col-owner").textContent = l.owner || "";
    row.querySelector(".col-identity").textContent = l.identity || "";
    row.querySelector(".col-generation").textContent = l.generation || "0";
    var x = row.querySelector(".col-expires");
    x.dataset.expiresIn = String(exp);
    x.dataset.deadline = String(Date.now() + exp);
    x.textContent = exp ? fmtDur(exp) : "—";
    row.querySelector(".col-ttl").textContent = fmtDur(ms(l.ttl));
    row.querySelector(".col-held").textContent = fmtDur(ms(l.held));
    row.querySelector(".col-renewals").textContent = l.renewals || "0";
    var v = row.querySelector(".col-value");
    v.textContent = "";
    var code = document.createElement("code");
    code.textContent = l.value == null ? "" : typeof l.value === "string" ? l.value : JSON.stringify(l.value);
    v.appendChild(code);
    row.classList.remove("flash-row");
    void row.offsetWidth;
    row.classList.add("flash-row");
  }

  function applyResource(e) {
    var table = document.getElementById("live-commits");
    var r = e.resource;
    if (!table || !r || r.resource !== table.dataset.resource) return;
    var tr = document.createElement("tr");
    tr.appendChild(cell("", e.index));
    tr.appendChild(cell("", (r.lease_name || "") + ":" + (r.max_generation || "0")));
    tr.appendChild(cell("", r.commits || "0"));
    tr.appendChild(cell("", r.last_idempotency_key || ""));
    var tbody = table.querySelector("tbody");
    tbody.insertBefore(tr, tbody.firstChild);
    while (tbody.children.length > 50) tbody.removeChild(tbody.lastChild);
    var mg = document.getElementById("max-generation");
    if (mg) mg.textContent = (r.lease_name || "") + ":" + (r.max_generation || "0");
    var c = document.getElementById("commits");
    if (c) c.textContent = r.commits || "0";
  }

  function startLive() {
    var live = document.getElementById("live");
    if (!live || !window.EventSource) return;
    var fam = live.dataset.family;
    var url = "/ui/events?family=" + encodeURIComponent(fam) + "&prefix=" + encodeURIComponent(live.dataset.prefix || "");
    var es = new EventSource(url);
    es.addEventListener("ready", function () { live.textContent = "live"; live.className = "live on"; });
    es.addEventListener("change", function (m) {
      var e = JSON.parse(m.data);
      if (fam === "lease") applyLease(e); else applyResource(e);
    });
    es.addEventListener("end", function (m) {
      var d = JSON.parse(m.data);
      es.close();
      live.textContent = "live updates stopped (" + (d.reason || d.code) + "): reloading";
      live.className = "live off";
      setTimeout(function () { location.reload(); }, 3000);
    });
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED) {
        live.textContent = "live updates unavailable";
        live.className = "live off";
      } else {
        live.textContent = "live: reconnecting…";
      }
    };
    window.addEventListener("pagehide", function () { es.close(); });
  }

  // Confirm destructive actions (each button its own question: a form
  // may hold several). Delegated, so buttons a refresh brings work too.
  function confirmActions() {
    document.addEventListener("click", function (ev) {
      var b = ev.target.closest && ev.target.closest("button.danger");
      if (!b || b.disabled) return;
      if (!window.confirm(b.textContent + " " + (b.dataset.what || "this job") + "?")) ev.preventDefault();
    });
  }

  // Auto-refresh: every data-every ms while the tab is visible, fetch the
  // page again and swap in its #refresh part (a small fragment: tables,
  // no scripts).
  function startRefresh() {
    var el = document.getElementById("refresh");
    if (!el || !window.fetch || !window.DOMParser) return;
    var every = Number(el.dataset.every) || 5000;
    var busy = false;
    function tick() {
      if (document.hidden || busy) return;
      busy = true;
      fetch(location.href, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        busy = false;
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("refresh");
        var cur = document.getElementById("refresh");
        if (!fresh || !cur) return;
        cur.innerHTML = fresh.innerHTML;
        var t = document.getElementById("refreshed");
        if (t) t.textContent = "updated " + new Date().toISOString().substring(11, 19) + " UTC";
      }).catch(function () { busy = false; });
    }
    setInterval(tick, every);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) tick(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    startCountdown();
    startLive();
    confirmActions();
    startRefresh();
  });
})();
