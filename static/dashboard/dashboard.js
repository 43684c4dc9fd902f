// Chime dashboard: small progressive enhancements. Every page works without this file.
(function () {
  "use strict";

  // The viewer's time zone, for server-rendered timestamps (apps/dashboard/zones.py).
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (zone && document.cookie.indexOf("chime_tz=" + zone) === -1) {
      document.cookie = "chime_tz=" + zone + "; path=/; max-age=31536000; samesite=lax";
    }
  } catch (e) { /* old browser: UTC */ }

  document.addEventListener("change", function (event) {
    var target = event.target;
    // Tenant switcher: submit on change (the button is there for keyboards and no-JS).
    if (target.matches("[data-autosubmit]")) target.form.requestSubmit();
    // "Select all" on the dead-letters page.
    if (target.matches("[data-select-all]")) {
      document.querySelectorAll('input[type=checkbox][name="' + target.dataset.selectAll + '"]').forEach(function (box) {
        box.checked = target.checked;
      });
    }
  });
  document.addEventListener("focusin", function (event) {
    if (event.target.matches("[data-select-on-focus]")) event.target.select();
  });
  document.documentElement.classList.add("js");

  // Live rows over a WebSocket (apps/dashboard/consumers.py). The server sends
  // {"rows": [{"id", "html", "insert"}]}: a row already on the page is replaced;
  // a new one is put on top of the table when "insert" is true.
  var MAX_ROWS = 200;

  function liveTable() {
    return document.querySelector("table[data-live-url]");
  }

  function setIndicator(text, state) {
    document.querySelectorAll("[data-live-indicator]").forEach(function (el) {
      el.textContent = text;
      el.dataset.state = state;
    });
  }

  // A run whose attempts the user opened keeps them open through a live update, unless a new
  // attempt was made meanwhile (then they are folded: the list the user read is out of date).
  function keepExpandedAttempts(existing, fresh) {
    var open = existing.querySelector("tr.attempts:not([hidden])");
    var slot = fresh.querySelector("tr.attempts");
    if (open && slot && existing.dataset.attempts === fresh.dataset.attempts) slot.replaceWith(open);
  }

  // A run is a <tbody> (its row, then its attempts slot); a job is a <tr>.
  function sameRow(existing, fresh) {
    var a = existing.rows ? existing.rows[0] : existing;
    var b = fresh.rows ? fresh.rows[0] : fresh;
    return !!a && !!b && a.outerHTML === b.outerHTML;
  }

  function applyRows(table, rows) {
    rows.forEach(function (row) {
      var template = document.createElement("template");
      template.innerHTML = row.html.trim();
      var fresh = template.content.firstElementChild;
      if (!fresh) return;
      var existing = document.getElementById(row.id);
      if (existing && sameRow(existing, fresh)) return;  // events can outrun renders: nothing new
      if (existing) {
        keepExpandedAttempts(existing, fresh);
        existing.replaceWith(fresh);
      } else if (row.insert) {
        var head = table.tHead;
        if (head) head.after(fresh); else table.prepend(fresh);
        var bodies = table.tBodies;
        for (var i = bodies.length - 1; i >= MAX_ROWS; i--) bodies[i].remove();
      } else {
        return;
      }
      if (window.htmx) window.htmx.process(fresh);
    });
  }

  // Too many changes at once: reload the table (its container answers HTMX requests with itself).
  function refresh(table) {
    var container = table.closest("[id]");
    if (container && window.htmx) {
      window.htmx.ajax("GET", window.location.href, { target: "#" + container.id, swap: "outerHTML" });
    }
  }

  function connect(delay) {
    var table = liveTable();
    if (!table || !("WebSocket" in window)) return;
    var url = new URL(table.dataset.liveUrl, window.location.href);
    url.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";
    var socket = new WebSocket(url.toString());
    socket.onopen = function () {
      delay = 500;
      setIndicator("live", "live");
    };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      var current = liveTable();
      if (!current) return;
      if (message.rows) applyRows(current, message.rows);
      if (message.refresh) refresh(current);
    };
    socket.onclose = function () {
      setIndicator("reconnecting…", "offline");
      window.setTimeout(function () { connect(Math.min(delay * 2, 15000)); }, delay);
    };
  }

  document.addEventListener("DOMContentLoaded", function () { connect(500); });
})();
