// Follows a running response on its console page: each event as it is committed (its type, when it
// arrived, and the response's milestones as rows of its timeline), the text as it streams, and the
// whole page again once the response has ended. Model text is only ever added as text nodes.
"use strict";

(function () {
  const live = document.getElementById("live");
  if (!live) {
    return;
  }
  const output = document.getElementById("live-output");
  const events = document.getElementById("live-events");
  const status = document.getElementById("status");
  const steps = document.querySelector("#steps tbody");
  const created = Number(live.dataset.createdMs);
  const milestones = {
    "response.in_progress": "claimed",
    "response.output_item.added": "output item opened",
    "response.output_item.done": "output item closed",
  };

  function mark(name, detail) {
    const row = document.createElement("tr");
    row.className = "mark-row live-row";
    for (const text of [name, (Date.now() - created).toFixed(1), "", detail]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.append(cell);
    }
    steps.append(row);
  }

  function show(event) {
    if (typeof event.delta === "string" && event.type.endsWith("_text.delta")) {
      output.append(event.delta);
      return;
    }
    if (event.type.endsWith(".delta")) {
      return; // (arguments and the like: their whole value shows when the page reloads)
    }
    const entry = document.createElement("li");
    entry.textContent = new Date().toISOString().slice(11, 23) + "  " + event.type;
    events.append(entry);
    if (event.type in milestones) {
      mark(milestones[event.type], event.item && event.item.type ? String(event.item.type) : "");
    } else if (event.response && ["completed", "failed", "incomplete", "cancelled"].includes(event.response.status)) {
      mark("ended", String(event.response.status));
    }
    if (event.response && event.response.status) {
      status.textContent = event.response.status;
    }
  }

  async function follow(url) {
    const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/event-stream" } });
    if (!answer.ok || !answer.body) {
      return;
    }
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        break;
      }
      buffer += value;
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trim())
          .join("\n");
        if (data && data !== "[DONE]") {
          show(JSON.parse(data));
        }
        end = buffer.indexOf("\n\n");
      }
    }
    live.dataset.ended = "true";
    window.location.reload();
  }

  follow(live.dataset.events);
})();
