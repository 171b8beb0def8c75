// redjob dashboard: theme switch, live refresh of [data-live] parts, and
// "select all" for checkbox lists. The pages work without it.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = null;
  try { saved = localStorage.getItem("redjob-theme"); } catch (e) { /* private mode */ }
  if (saved) root.dataset.theme = saved;

  function dark() {
    if (root.dataset.theme) return root.dataset.theme === "dark";
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme");
    if (button) button.addEventListener("click", function () {
      root.dataset.theme = dark() ? "light" : "dark";
      try { localStorage.setItem("redjob-theme", root.dataset.theme); } catch (e) { /* ignore */ }
    });

    document.querySelectorAll("input[data-select-all]").forEach(function (all) {
      all.addEventListener("change", function () {
        var form = all.closest("form") || document;
        form.querySelectorAll("input[name=id]").forEach(function (box) { box.checked = all.checked; });
      });
    });

    every = parseInt(document.body.dataset.refresh || "0", 10);
    if (every > 0 && document.querySelector("[data-live]")) {
      schedule(every);
      // a tab that comes back catches up at once
      document.addEventListener("visibilitychange", function () {
        if (document.visibilityState === "visible") refresh();
      });
    }
  });

  // An element the user is working in (focus, a checked box) is left alone.
  function busy(el) {
    return el.contains(document.activeElement) && document.activeElement !== document.body
      || el.querySelector("input[type=checkbox]:checked") !== null;
  }

  // The refresh period (ms), and the wait before the next one: the period,
  // or four times what the last render took when that is longer (at most a
  // minute), so that a slow server is not asked faster than it answers.
  var every = 0, timer = null;
  function schedule(wait) {
    if (timer) clearTimeout(timer);
    timer = setTimeout(refresh, wait);
  }

  var running = false;
  function refresh() {
    // a hidden tab asks nothing; it refreshes when shown again
    if (running || document.visibilityState !== "visible") return schedule(every);
    running = true;
    var started = Date.now();
    fetch(location.href, { headers: { "X-Redjob-Refresh": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var next = el.id && fresh.getElementById(el.id);
          if (next && !busy(el)) el.innerHTML = next.innerHTML;
        });
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () {
        running = false;
        var took = Date.now() - started;
        document.body.dataset.refreshWait = String(Math.min(60000, Math.max(every, 4 * took)));
        schedule(parseInt(document.body.dataset.refreshWait, 10));
      });
  }
})();
