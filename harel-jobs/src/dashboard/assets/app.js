// harel-jobs dashboard: the little JavaScript it has. Forms with data-confirm ask before
// they are sent; "select all" boxes tick the boxes of their table; the live parts of a page
// (data-live) refresh themselves. Everything works without it, except that nothing asks
// first and pages show what they showed when loaded.
var harelConfirming = false;
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (question) {
    harelConfirming = true;
    var sure = window.confirm(question);
    harelConfirming = false;
    if (!sure) {
      event.preventDefault();
    }
  }
});
document.addEventListener("change", function (event) {
  var box = event.target;
  if (box.matches && box.matches("input[data-select-all]")) {
    var form = box.closest("form");
    form.querySelectorAll("input[name=id]").forEach(function (other) {
      other.checked = box.checked;
    });
  }
});

// Live parts: every data-every ms, the page is fetched again (the same bounded work as
// loading it; one request at a time) and each [data-live] part is replaced by the part of
// the same name. Paused while the reader acts: a focused field or button, selected text, a
// confirmation open, the tab hidden. #live-status says which (data-state, data-ticks,
// data-paused-ticks).
(function () {
  var status = document.getElementById("live-status");
  if (!status || !document.querySelector("[data-live]")) {
    return;
  }
  var every = Math.max(1000, parseInt(status.getAttribute("data-every"), 10) || 5000);
  var inFlight = false;
  var ticks = 0;
  var pausedTicks = 0;

  function acting() {
    if (document.hidden || harelConfirming) {
      return true;
    }
    var active = document.activeElement;
    if (active && active !== document.body &&
        active.matches("input, select, textarea, button, [contenteditable]")) {
      return true;
    }
    var selection = window.getSelection ? window.getSelection() : null;
    return !!(selection && !selection.isCollapsed && selection.toString().length > 0);
  }

  function show(state) {
    status.setAttribute("data-state", state);
    status.setAttribute("data-ticks", String(ticks));
    status.setAttribute("data-paused-ticks", String(pausedTicks));
  }

  function tick() {
    if (inFlight) {
      return;
    }
    if (acting()) {
      pausedTicks += 1;
      show("paused");
      return;
    }
    inFlight = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (text) {
        // the reader may have started acting while the page was fetched: keep what they see
        if (text === null || acting()) {
          pausedTicks += text === null ? 0 : 1;
          show(text === null ? "failed" : "paused");
          return;
        }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (part) {
          var name = part.getAttribute("data-live");
          fresh.querySelectorAll("[data-live]").forEach(function (other) {
            // unchanged parts are left alone (a button found a moment ago stays the same)
            if (other.getAttribute("data-live") === name && other.innerHTML !== part.innerHTML) {
              part.replaceChildren.apply(part, Array.prototype.slice.call(other.childNodes));
            }
          });
        });
        ticks += 1;
        show("live");
      })
      .catch(function () {
        show("failed");
      })
      .then(function () {
        inFlight = false;
      });
  }

  show("live");
  window.setInterval(tick, every);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      tick();
    }
  });
})();
