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

  // A run whose attempts the user opened keeps them open when its row is rendered again (a live
  // update, a poll): the open row itself moves into the new one, unfolded headers and all. True
  // when the run has new attempts since: the caller then fetches the list again, once the new
  // row is in the page.
  function keepOpenAttempts(existing, fresh) {
    var open = existing.querySelector("tr.attempts:not([hidden])");
    var slot = fresh.querySelector("tr.attempts");
    if (!open || !slot) return false;
    slot.replaceWith(open);
    return existing.dataset.attempts !== fresh.dataset.attempts;
  }

  // The user asked for a run's attempts and the answer has not come yet (htmx marks the link it
  // is loading for with htmx-request). htmx resolved the target when the request left; if the row
  // is rendered again meanwhile, the answer lands in the detached old slot and the click is lost.
  function openingAttempts(run) {
    var slot = run.querySelector("tr.attempts[hidden]");
    return !!slot && !!run.querySelector('.htmx-request[hx-target="#' + slot.id + '"]');
  }

  // Fetch the attempts into the run's slot: the open one, or (evenIfFolded) the one being opened.
  function reloadAttempts(run, evenIfFolded) {
    var slot = run.querySelector(evenIfFolded ? "tr.attempts" : "tr.attempts:not([hidden])");
    var link = slot && run.querySelector('[hx-get][hx-target="#' + slot.id + '"]');
    if (link && window.htmx) {
      window.htmx.ajax("GET", link.getAttribute("hx-get"), { target: "#" + slot.id, swap: "outerHTML" });
    }
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
      var stale = false, opening = false;
      if (existing) {
        opening = openingAttempts(existing);
        stale = keepOpenAttempts(existing, fresh);
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
      if (stale || opening) reloadAttempts(fresh, opening);
    });
  }

  // Without a WebSocket (embedded mode) a live table's container polls and is swapped whole
  // (hx-swap=outerHTML), which used to fold every open "Attempts" row and untick every box at
  // each poll. What the user opened or ticked in the old container is carried into the new one.
  var swapping = new WeakMap();  // request -> the live container it is about to replace

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (target && target.querySelector && target.querySelector("table[data-live-rows]")) {
      swapping.set(event.detail.xhr, target);
    }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    var old = swapping.get(event.detail.xhr);
    if (!old) return;
    swapping.delete(event.detail.xhr);
    old.querySelectorAll("tbody.run[id]").forEach(function (existing) {
      var fresh = document.getElementById(existing.id);
      if (!fresh || fresh === existing) return;
      var opening = openingAttempts(existing);
      var stale = keepOpenAttempts(existing, fresh);
      if (window.htmx) window.htmx.process(fresh);  // the moved row lost its handlers in the swap
      if (stale || opening) reloadAttempts(fresh, opening);
    });
    old.querySelectorAll("input[type=checkbox][id]:checked").forEach(function (box) {
      var same = document.getElementById(box.id);
      if (same && same !== box && same.type === "checkbox" && !same.disabled) same.checked = true;
    });
  });

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
