// The Chat page: a conversation's events (Server-Sent Events), the composer, paging, buttons,
// files and voice notes. HTML shown here was rendered on the server (escaped; the model's
// Markdown through the vetted renderer); a reply growing here is only ever text.
"use strict";
(() => {
  const conversation = document.getElementById("conversation");
  if (!conversation) return;
  const url = conversation.dataset.url;
  const csrf = conversation.dataset.csrf;
  const messages = document.getElementById("messages");
  const thinking = document.getElementById("thinking");
  const form = document.getElementById("composer");
  const box = document.getElementById("text");
  const stop = document.getElementById("stop");
  const problem = document.getElementById("problem");
  const files = document.getElementById("file");
  const attached = document.getElementById("attached");
  const commands = document.getElementById("commands");
  const record = document.getElementById("record");
  const running = new Set();

  const nearBottom = () =>
    window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
  const toBottom = () => window.scrollTo(0, document.documentElement.scrollHeight);

  function nodes(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    return Array.from(template.content.children);
  }

  function show(text) {
    if (!problem) return;
    problem.textContent = text;
    problem.hidden = !text;
  }

  function post(path, body) {
    return fetch(url + path, {
      method: "POST",
      body: body,
      headers: { "X-CSRF-Token": csrf },
      credentials: "same-origin",
    }).then(async (response) => {
      if (!response.ok) throw new Error((await response.text()) || response.statusText);
      show("");
    });
  }

  function turns() {
    const busy = running.size > 0;
    if (thinking) thinking.hidden = !busy;
    if (stop) stop.hidden = !busy;
    conversation.classList.toggle("busy", busy);
  }

  // What the session holds, each message once (a page that reconnects may be sent it again),
  // where what it replaces stood: the person's message as received, the reply as it grew.
  function saved(data) {
    const follow = nearBottom();
    const replaced = Array.from(messages.querySelectorAll(".pending")).filter((el) =>
      (data.ins || []).includes(el.dataset.in),
    );
    const growing = data.turn ? live(data.turn, false) : null;
    if (growing) replaced.push(growing);
    replaced.sort((a, b) => (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1));
    const anchor = replaced.length ? replaced[0] : null;
    for (const node of nodes(data.html)) {
      if (node.classList.contains("earlier")) continue;
      if (node.id && document.getElementById(node.id)) continue;
      messages.insertBefore(node, anchor);
    }
    replaced.forEach((el) => el.remove());
    if (follow) toBottom();
  }

  function live(turn, make) {
    let reply = Array.from(messages.querySelectorAll(".live")).find((el) => el.dataset.turn === turn);
    if (!reply && make) {
      reply = document.createElement("article");
      reply.className = "msg reply live";
      reply.dataset.turn = turn;
      messages.appendChild(reply);
    }
    return reply;
  }

  function grow(data) {
    const follow = nearBottom();
    const reply = live(data.turn, true);
    let step = Array.from(reply.querySelectorAll(".text")).find(
      (el) => el.dataset.step === String(data.step),
    );
    if (!step) {
      step = document.createElement("p");
      step.className = "text";
      step.dataset.step = String(data.step);
      reply.appendChild(step);
    }
    step.appendChild(document.createTextNode(data.piece));
    if (follow) toBottom();
  }

  function toolStep(data) {
    const line = document.createElement("p");
    line.className = "step";
    line.textContent = data.line;
    live(data.turn, true).appendChild(line);
  }

  function appendHtml(html) {
    const follow = nearBottom();
    for (const node of nodes(html)) messages.appendChild(node);
    if (follow) toBottom();
  }

  if (conversation.dataset.writable === "yes") {
    const since = "?after=" + conversation.dataset.shown + "&note=" + conversation.dataset.notes;
    const events = new EventSource(url + "/events" + since);
    const on = (name, handle) =>
      events.addEventListener(name, (event) => handle(JSON.parse(event.data)));
    on("messages", saved);
    on("sent", (data) => {
      const known = Array.from(messages.querySelectorAll("[data-in]")).some(
        (el) => el.dataset.in === data.in,
      );
      if (!known) appendHtml(data.html);
    });
    on("turn", (data) => {
      if (data.state === "started") running.add(data.turn);
      else running.delete(data.turn);
      turns();
    });
    on("delta", grow);
    on("step", toolStep);
    on("note", (data) => appendHtml(data.html));
    on("reload", () => window.location.reload());
    events.addEventListener("error", () => {
      // It reconnects by itself and is sent the state again: what is growing starts anew.
      messages.querySelectorAll(".live, .pending").forEach((el) => el.remove());
      running.clear();
      turns();
    });
  }

  // Older messages: a page at a time, when "Earlier" is pressed or scrolled into view.
  function earlier(button) {
    if (button.disabled) return;
    button.disabled = true;
    fetch(button.dataset.url, { credentials: "same-origin" })
      .then(async (response) => {
        const text = await response.text();
        if (!response.ok) throw new Error(text || response.statusText);
        return text;
      })
      .then((html) => {
        const before = document.documentElement.scrollHeight;
        const anchor = button.nextElementSibling;
        for (const node of nodes(html)) {
          if (node.id && document.getElementById(node.id)) continue;
          messages.insertBefore(node, anchor);
          if (node.classList.contains("earlier")) watch(node);
        }
        button.remove();
        window.scrollBy(0, document.documentElement.scrollHeight - before);
      })
      .catch((error) => {
        button.disabled = false;
        show(error.message);
      });
  }
  const seen = new IntersectionObserver((found) => {
    for (const one of found) if (one.isIntersecting) earlier(one.target);
  });
  function watch(button) {
    seen.observe(button);
  }
  messages.addEventListener("click", (event) => {
    const button = event.target.closest("button.earlier");
    if (button) earlier(button);
  });
  toBottom();
  messages.querySelectorAll("button.earlier").forEach((button) => setTimeout(() => watch(button), 300));

  // Buttons under a message: the command, pressed; handed to the core at once.
  messages.addEventListener("submit", (event) => {
    const choices = event.target.closest("form.choices");
    if (!choices) return;
    event.preventDefault();
    const pressed = event.submitter;
    const body = new FormData();
    body.append("command", pressed ? pressed.value : "");
    choices.querySelectorAll("button").forEach((button) => {
      button.disabled = true;
    });
    if (pressed) pressed.classList.add("chosen");
    post("/press", body).catch((error) => {
      show(error.message);
      choices.querySelectorAll("button").forEach((button) => {
        button.disabled = false;
      });
    });
  });

  if (!form) return;

  function attachedNames() {
    const names = Array.from(files.files || []).map((file) => file.name);
    attached.textContent = names.length ? "Attached: " + names.join(", ") : "";
  }

  function send(body) {
    return post("/send", body).then(() => {
      box.value = "";
      files.value = "";
      attachedNames();
      commands.hidden = true;
    });
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = new FormData(form);
    if (!box.value.trim() && !(files.files && files.files.length)) return;
    send(body).catch((error) => show(error.message));
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  box.addEventListener("input", () => {
    const typed = box.value;
    const open = typed.startsWith("/") && !/\s/.test(typed);
    commands.hidden = !open;
    if (!open) return;
    commands.querySelectorAll("li").forEach((item) => {
      const name = item.querySelector("button").dataset.command;
      item.hidden = !name.startsWith(typed);
    });
  });
  commands.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-command]");
    if (!button) return;
    box.value = button.dataset.command + " ";
    commands.hidden = true;
    box.focus();
  });
  stop.addEventListener("click", () => post("/stop", new FormData()).catch((e) => show(e.message)));
  files.addEventListener("change", attachedNames);
  for (const target of [form, conversation]) {
    target.addEventListener("dragover", (event) => event.preventDefault());
    target.addEventListener("drop", (event) => {
      event.preventDefault();
      if (event.dataTransfer && event.dataTransfer.files.length) {
        files.files = event.dataTransfer.files;
        attachedNames();
      }
    });
  }

  // A voice note, recorded here and sent as the person's own voice.
  let recorder = null;
  record.addEventListener("click", async () => {
    if (recorder) {
      recorder.stop();
      return;
    }
    if (!navigator.mediaDevices || !window.MediaRecorder) {
      show("This browser cannot record here.");
      return;
    }
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const chunks = [];
      recorder = new MediaRecorder(stream);
      recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
      recorder.addEventListener("stop", () => {
        stream.getTracks().forEach((track) => track.stop());
        recorder = null;
        record.textContent = "Record a voice note";
        const type = chunks.length ? chunks[0].type : "audio/webm";
        const body = new FormData();
        body.append("voice", new File(chunks, "voice-note", { type: type }));
        send(body).catch((error) => show(error.message));
      });
      recorder.start();
      record.textContent = "Stop recording and send";
    } catch (error) {
      show("Recording failed: " + error.message);
    }
  });
})();
