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

    var every = parseInt(document.body.dataset.refresh || "0", 10);
    if (every > 0 && document.querySelector("[data-live]")) setInterval(refresh, every);
  });

  // An element the user is working in (focus, a checked box) is left alone.
  function busy(el) {
    return el.contains(document.activeElement) && document.activeElement !== document.body
      || el.querySelector("input[type=checkbox]:checked") !== null;
  }

  var running = false;
  function refresh() {
    if (running || document.visibilityState !== "visible") return;
    running = true;
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
      .then(function () { running = false; });
  }
})();
