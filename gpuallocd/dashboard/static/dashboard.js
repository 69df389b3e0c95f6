// gpuallocd dashboard: swaps the server-rendered sections for fresh ones, without reloading.
// The page is complete without this script; it only keeps it current while it is visible.
"use strict";
(function () {
  var LIVE_EVERY_MS = 2000;
  var CHARTS_EVERY_MS = 60000;

  function swap(parts) {
    Object.keys(parts).forEach(function (key) {
      var target = key === "now" ? document.getElementById("now") : document.getElementById(key);
      if (!target) return;
      if (key === "now") target.textContent = parts[key];
      else if (target.innerHTML !== parts[key]) target.innerHTML = parts[key];
    });
    document.body.classList.remove("stale");
  }

  function poll(path, every) {
    function tick() {
      if (document.hidden) { setTimeout(tick, every); return; }
      fetch(path, { cache: "no-store", credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
        .then(swap)
        .catch(function () { document.body.classList.add("stale"); })
        .then(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }

  document.documentElement.classList.add("live");
  poll("api/live", LIVE_EVERY_MS);
  poll("api/charts", CHARTS_EVERY_MS);
})();
