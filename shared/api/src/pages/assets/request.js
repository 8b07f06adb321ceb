// The person's page of a request (docs/API.md §12): each <time datetime> in the reader's own
// locale and time zone, which the server cannot know ("Open until Fri 11 Dec, 14:42"). The
// server's text (UTC) stays as the element's title, and is what a reader without script sees.
// Only the page's own attribute is read, and the text is set with textContent.
"use strict";
(function () {
  const now = new Date();
  for (const t of document.querySelectorAll("time[datetime]")) {
    const d = new Date(t.getAttribute("datetime"));
    if (Number.isNaN(d.getTime())) continue;
    const options = { weekday: "short", day: "numeric", month: "short", hour: "numeric", minute: "2-digit" };
    if (d.getFullYear() !== now.getFullYear()) options.year = "numeric";
    t.title = t.textContent;
    t.textContent = d.toLocaleString(undefined, options);
  }
  // Done: automation waits for this mark, as on the inbox viewer (docs/API.md §13).
  document.documentElement.dataset.ready = "true";
})();
