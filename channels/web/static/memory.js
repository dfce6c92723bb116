// The Memory page: a refused edit or why is shown where it was asked for (htmx swaps no
// 4xx answer by default), and an edit too large to be sent back keeps the text typed.
"use strict";
document.addEventListener("htmx:beforeSwap", (event) => {
  const detail = event.detail;
  const status = detail.xhr.status;
  const source = detail.requestConfig && detail.requestConfig.elt;
  if (status < 400 || status >= 500 || !source || !source.closest("[data-swap-errors]")) {
    return;
  }
  detail.shouldSwap = true;
  detail.isError = false;
  if (status === 413) {
    const form = source.closest("form");
    const slot = form && form.querySelector(".edit-error");
    if (slot) {
      detail.target = slot;
    }
  }
});
