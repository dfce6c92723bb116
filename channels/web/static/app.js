// The web app's own script (no inline script anywhere: the CSP forbids it). Shared part first;
// a page's own behaviour lives in its own file, loaded from its template's `scripts` block.
"use strict";

// A request htmx makes that fails says why in the page's notice line, as text (never HTML):
// an expired form (403), too many tries (429), the gateway gone.
(function () {
  function notice(text) {
    const line = document.getElementById("notice");
    if (line) {
      line.textContent = text;
      line.hidden = !text;
    }
  }
  document.addEventListener("htmx:beforeRequest", function () {
    notice("");
  });
  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    const said = (xhr.getResponseHeader("Content-Type") || "").startsWith("text/plain")
      ? xhr.responseText.slice(0, 300)
      : "";
    notice(said || "That did not work (" + xhr.status + "): reload the page and try again.");
  });
  document.addEventListener("htmx:sendError", function () {
    notice("The gateway cannot be reached: is `nanomem gateway` running?");
  });
})();

// At a phone's width the pages' links scroll in one row: the current page's is brought into it.
document.addEventListener("DOMContentLoaded", function () {
  const current = document.querySelector('header.top nav a[aria-current="page"]');
  if (current) {
    current.scrollIntoView({ block: "nearest", inline: "center" });
  }
});
