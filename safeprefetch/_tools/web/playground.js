/*
 * The playground: be the scheduler of one catalog model, in the browser, offline.
 *
 * What it guarantees
 * ------------------
 * The page runs no model code. Python exported the model's whole state graph
 * (safeprefetch/_tools/playground.py): every state, every enabled step and its
 * successor, and every verdict a state decides by itself. Clicking a thread
 * follows one edge of that graph, so what the learner plays is exactly what the
 * checker explored. Two verdicts depend on the path, not the state, and this
 * script applies the checker's rule to the learner's own path:
 *
 *   - a stuck state is a lost wakeup when a sleeping thread's predicate holds and
 *     no notify reached its condvar since it began to hold, else a deadlock
 *     (safeprefetch/_check/verdict.py, classify_hang);
 *   - a cycle the learner closes is starvation when some thread never takes a
 *     progress step in it while every thread that is always enabled in it steps
 *     in it (weak fairness; safeprefetch/_check/liveness.py).
 *
 * tests/test_site_browser.py drives this page in Chromium and compares both
 * rules with the checker on the same paths.
 *
 * Data arrive as plain <script> files (window.SAFEPREFETCH_PLAYGROUND), not by
 * fetch(), so the built site works from file:// with no server.
 */
(function () {
  "use strict";

  var FORMAT = 1;  // the export's layout version (playground.py's FORMAT)
  var STORE = "safeprefetch-playground";
  var SPEEDS = { slow: 700, normal: 300, fast: 60, instant: 0 };
  var DATA = (window.SAFEPREFETCH_PLAYGROUND = window.SAFEPREFETCH_PLAYGROUND || { meta: {}, variants: {} });

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "cls") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) node.appendChild(c); });
    return node;
  }

  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("cannot load " + src)); };
      document.head.appendChild(s);
    });
  }

  function readProgress() {
    try { return JSON.parse(window.localStorage.getItem(STORE) || "{}"); } catch (e) { return {}; }
  }

  function saveProgress(model, how) {
    var all = readProgress();
    var before = all[model];
    if (before === "found" && how !== "found") return;  // finding it yourself is never downgraded
    all[model] = how;
    try { window.localStorage.setItem(STORE, JSON.stringify(all)); } catch (e) { /* private mode */ }
  }

  // ---------------------------------------------------------------- the game

  function Playground(root) {
    this.root = root;
    this.name = root.getAttribute("data-model");
    this.base = root.getAttribute("data-base");
    this.graph = null;
    this.key = null;
    this.path = [0];      // state numbers, initial state first
    this.choices = [];    // the moves taken, one per step
    this.timer = null;
    this.by = "hand";     // "hand" or "show me": how the current path was made
  }

  Playground.prototype.start = function () {
    var self = this;
    return loadScript(this.base + "meta.js").then(function () {
      self.meta = DATA.meta[self.name];
      self.build();
      return self.open(self.meta["default"]);
    }).catch(function (e) {
      self.root.textContent = "The playground could not load its data: " + e.message;
    });
  };

  Playground.prototype.open = function (key) {
    var self = this;
    var file = this.meta.files[key];
    if (!file) return Promise.resolve(this.say("unavailable", "This combination was not exported.", ""));
    var ready = DATA.variants[this.name + " " + key] ? Promise.resolve() : loadScript(this.base + file);
    this.wanted = key;
    this.root.setAttribute("data-ready", "loading");
    return ready.then(function () {
      if (self.wanted !== key) return;  // the learner switched again while this one loaded: the last wins
      var graph = DATA.variants[self.name + " " + key];
      if (graph.format !== FORMAT) {
        self.root.setAttribute("data-ready", "error");
        self.say("error", "This page's data are of another format (" + graph.format + ", not " + FORMAT + ").",
                 "Rebuild the site with `python -m safeprefetch docs build`.");
        return;
      }
      self.key = key;
      self.graph = graph;
      self.pcIndex = self.graph.threads.map(function (t) { return self.graph.fields.indexOf(t.name + ".pc"); });
      self.restart();
      self.root.setAttribute("data-variant", key);
      self.root.setAttribute("data-ready", "yes");
    });
  };

  Playground.prototype.state = function () { return this.graph.states[this.path[this.path.length - 1]]; };

  Playground.prototype.restart = function () {
    this.stop();
    this.path = [0];
    this.choices = [];
    this.by = "hand";
    this.render();
  };

  Playground.prototype.undo = function () {
    this.stop();
    if (!this.choices.length) return;
    this.choices.pop();
    if (this.path.length > this.choices.length + 1) this.path.pop();
    if (!this.choices.length) this.by = "hand";  // all of a shown path undone: a fresh start
    this.render();
  };

  // A step clicked after "Show me": while it is the shown trace's step at that point, the bug it reaches was
  // shown, not found (undo, then the same last step again, read "You found the bug"); a step of the
  // learner's own makes the path theirs from there on. Restart clears it.
  Playground.prototype.byHand = function (move) {
    var want = this.graph.checker.trace[this.choices.length];
    if (this.by !== "show me" || !want || want[0] !== move.thread || want[1] !== move.branch) this.by = "hand";
  };

  // "Show me" is playing: from its first step on, before its first timer is set (a click in the first delay
  // broke the animation, which then said the counterexample did not fit the graph).
  Playground.prototype.playing = function () {
    return this.timer !== null || this.root.getAttribute("data-playing") === "yes";
  };

  Playground.prototype.take = function (move) {
    this.choices.push(move);
    if (move.to !== undefined && move.to !== null) this.path.push(move.to);
    this.render();
  };

  // ------------------------------------------------------------- the verdict

  Playground.prototype.judge = function () {
    var last = this.choices[this.choices.length - 1];
    if (last && last.violation) return last.violation;
    if (last && last.to === null) {
      return { kind: "excerpt", headline: "the excerpt ends here",
               message: "This model has more states than the page holds (" + this.graph.max_states +
                        "); run `python -m safeprefetch play " + this.graph.model + "` to go on." };
    }
    var st = this.state();
    if (st.status && st.status.hang) return this.hang(st.status.hang);
    if (st.status) return st.status;
    if (this.graph.progress) {
      var starved = this.starvation();
      if (starved) return starved;
    }
    return { kind: null, headline: "running", message: "" };
  };

  Playground.prototype.hang = function (h) {
    if (h.shutdown) return { kind: "shutdown_hang", headline: "all threads blocked: shutdown_hang", message: h.shutdown };
    for (var i = 0; i < h.lost.length; i++) {
      if (this.lostWakeup(h.lost[i])) {
        return { kind: "lost_wakeup", headline: "all threads blocked: lost_wakeup", message: h.lost[i].message };
      }
    }
    return { kind: "deadlock", headline: "all threads blocked: deadlock", message: h.deadlock };
  };

  // classify_hang's rule on this path: since the thread went to sleep, from the last state where its
  // predicate did not hold, did any step notify its condvar while someone waited on it?
  Playground.prototype.lostWakeup = function (lost) {
    var states = this.graph.states, path = this.path, choices = this.choices, n = path.length - 1;
    var slept = 0, i;
    for (i = 0; i < choices.length; i++) if (choices[i].thread === lost.thread) slept = i + 1;
    var since = slept;
    for (i = n; i >= slept; i--) {
      if (states[path[i]].holds.indexOf(lost.key) < 0) { since = i + 1; break; }
    }
    for (i = since; i < choices.length; i++) if (choices[i].notifies === lost.cond) return false;
    return true;
  };

  // A cycle the learner just closed, judged as the checker judges one (safeprefetch/_check/lasso.py): it
  // takes no spurious wakeup; it is fair -- weak: every thread enabled in all its states steps in it;
  // strong (fairness=strong): every step enabled in one of its states is taken in it -- and some thread
  // with progress steps, running (not done, not "not started") all along, takes none in it.
  Playground.prototype.starvation = function () {
    // Every earlier visit of the state just reached closes a cycle; the latest (shortest) is tried first.
    // (Trying only the latest missed a fair cycle through an earlier visit, whose own last loop was unfair.)
    // Everything the rule asks of a cycle is a fold over its steps, so the cycles from every visit are the
    // suffixes of one backward scan (as reverify.latest_starving_visit): one replay per visit made a long
    // session that keeps coming back to a state quadratic (6.8 s a step after 10,006 steps).
    var path = this.path, n = path.length - 1, graph = this.graph, choices = this.choices, self = this;
    if (path.lastIndexOf(path[n], n - 1) < 0) return null;
    var strong = graph.config.fairness === "strong";
    var owed = {}, paid = {}, always = null, moved = {}, idle = {}, progressed = {};
    for (var from = n - 1; from >= 0; from--) {
      var m = choices[from], here = path[from], enabled = {};
      if (m.spurious) return null;  // every cycle from here back takes it
      paid[m.thread + " " + self.pcOf(here, m.thread)] = true;
      moved[m.thread] = true;
      if (m.progress) progressed[m.thread] = true;
      graph.states[here].moves.forEach(function (e) {
        if (e.spurious || e.held || e.violation) return;
        enabled[e.thread] = true;
        owed[e.thread + " " + self.pcOf(here, e.thread)] = true;
      });
      always = always === null ? enabled : Object.keys(always).reduce(function (acc, t) {
        if (enabled[t]) acc[t] = true; return acc; }, {});
      graph.victims.forEach(function (t) {
        var note = graph.places[t][self.pcOf(here, t)].note;
        if (note === "done" || note === "not started") idle[t] = true;
      });
      if (here !== path[n]) continue;
      var fair = strong ? Object.keys(owed).every(function (k) { return paid[k]; })
                        : Object.keys(always).every(function (t) { return moved[t]; });
      if (!fair) continue;
      for (var v = 0; v < graph.victims.length; v++) {
        var t = graph.victims[v], steps = n - from;
        if (!idle[t] && !progressed[t]) {
          return { kind: "starvation", headline: "starvation: " + graph.threads[t].name + " never makes progress",
                   message: "you closed a cycle of " + steps + (steps === 1 ? " step" : " steps") +
                            " (from step " + from +
                            ") that the scheduler may repeat forever, and " + graph.threads[t].name +
                            " takes no progress step in it" };
        }
      }
    }
    return null;
  };

  Playground.prototype.pcOf = function (stateNumber, t) {
    return this.graph.states[stateNumber].values[this.pcIndex[t]];
  };

  // ------------------------------------------------------------- show me

  Playground.prototype.stop = function () {
    if (this.timer !== null) { clearTimeout(this.timer); this.timer = null; }
    this.root.removeAttribute("data-playing");
  };

  Playground.prototype.showMe = function () {
    var self = this, trace = this.graph.checker.trace;
    this.restart();
    this.by = "show me";
    if (!trace.length) { this.render(); return; }
    var delay = SPEEDS[this.controls.speed.value];
    var k = 0;
    this.root.setAttribute("data-playing", "yes");
    function next() {
      var want = trace[k];
      var move = self.state().moves.filter(function (m) { return m.thread === want[0] && m.branch === want[1]; })[0];
      if (!move) { self.stop(); self.say("error", "the counterexample does not fit this graph", ""); return; }
      k += 1;
      self.take(move);
      if (k < trace.length) {
        if (delay) self.timer = setTimeout(next, delay); else next();
      } else {
        self.stop();
        self.render();
      }
    }
    next();
  };

  // ------------------------------------------------------------- drawing

  Playground.prototype.build = function () {
    var self = this, meta = this.meta;
    this.root.innerHTML = "";
    var design = el("select", { id: "pg-design", "aria-label": "design" }, [
      el("option", { value: "model", text: meta.model })]);
    if (meta.fix) design.appendChild(el("option", { value: "fix", text: "the fix: " + meta.fix }));
    var notify = el("select", { id: "pg-notify", "aria-label": "notify" },
                    ["fifo", "any"].map(function (v) { return el("option", { value: v, text: "notify=" + v }); }));
    var spurious = el("select", { id: "pg-spurious", "aria-label": "spurious wakeups" },
                      ["off", "on"].map(function (v) { return el("option", { value: v, text: "spurious=" + v }); }));
    var speed = el("select", { id: "pg-speed", "aria-label": "animation speed" },
                   Object.keys(SPEEDS).map(function (v) { return el("option", { value: v, text: v }); }));
    speed.value = "normal";
    var parts = meta["default"].split(" ");
    notify.value = parts[1];
    spurious.value = parts[2];
    this.controls = { design: design, notify: notify, spurious: spurious, speed: speed };
    function reopen() { self.open(design.value + " " + notify.value + " " + spurious.value); }
    [design, notify, spurious].forEach(function (s) { s.addEventListener("change", reopen); });
    var undo = el("button", { id: "pg-undo", type: "button", text: "Undo" });
    var restart = el("button", { id: "pg-restart", type: "button", text: "Restart" });
    var show = el("button", { id: "pg-show", type: "button", text: "Show me" });
    undo.addEventListener("click", function () { self.undo(); });
    restart.addEventListener("click", function () { self.restart(); });
    show.addEventListener("click", function () { self.showMe(); });
    this.root.appendChild(el("div", { cls: "pg-controls" }, [design, notify, spurious, undo, restart, show,
      el("label", { text: " speed " }, [speed])]));
    this.verdictBox = el("p", { id: "pg-verdict", cls: "pg-verdict" });
    this.statusBox = el("div", { id: "pg-status", cls: "pg-status", role: "status", "aria-live": "polite" });
    this.threadsBox = el("div", { id: "pg-threads", cls: "pg-threads" });
    this.sharedBox = el("table", { id: "pg-shared", cls: "pg-shared" });
    this.laneBox = el("table", { id: "pg-lane", cls: "pg-lane" });
    this.raw = el("pre", { id: "pg-raw" });
    this.graphBox = el("div", { id: "pg-graph", cls: "pg-graph" });
    this.root.appendChild(this.verdictBox);
    this.root.appendChild(this.statusBox);
    this.root.appendChild(this.threadsBox);
    this.root.appendChild(el("h3", { text: "Shared state" }));
    this.root.appendChild(this.sharedBox);
    this.root.appendChild(el("h3", { text: "Your steps" }));
    this.root.appendChild(this.laneBox);
    this.root.appendChild(el("details", { id: "pg-all" }, [el("summary", { text: "Every field, as JSON" }), this.raw]));
    if (this.root.getAttribute("data-graph") === "on") {
      this.root.appendChild(el("h3", { text: "The state graph" }));
      this.root.appendChild(this.graphBox);
    }
  };

  Playground.prototype.say = function (kind, headline, message) {
    this.statusBox.setAttribute("data-kind", kind || "running");
    this.statusBox.innerHTML = "";
    this.statusBox.appendChild(el("strong", { text: headline }));
    if (message) this.statusBox.appendChild(el("span", { text: " " + message }));
  };

  Playground.prototype.render = function () {
    var verdict = this.judge(), over = verdict.kind !== null;
    this.renderVerdict();
    if (!over) {
      this.say(null, this.choices.length ? "Your turn." : "Click a thread to step it.",
               "Each button is a step that thread can take now; the highlighted line is where it stands.");
    } else if (verdict.kind === "ok") {
      this.say("ok", verdict.headline, "Every thread finished and every end-of-run check holds.");
    } else {
      var found = this.key.split(" ")[0] === "model" && verdict.kind === this.graph.checker.verdict;
      this.say(verdict.kind, verdict.headline, verdict.message + (found && this.by === "hand"
        ? " You found the bug the checker reports." : ""));
      if (found && this.root.getAttribute("data-playing") !== "yes") saveProgress(this.name, this.by === "hand" ? "found" : "shown");
    }
    this.root.setAttribute("data-over", over ? "yes" : "no");
    this.root.setAttribute("data-kind", verdict.kind || "running");
    this.root.setAttribute("data-steps", String(this.choices.length));
    this.root.setAttribute("data-path", JSON.stringify(this.choices.map(function (m) { return [m.thread, m.branch]; })));
    this.renderThreads(over);
    this.renderShared();
    this.renderLane(verdict);
    if (this.root.getAttribute("data-graph") === "on") this.renderGraph();
  };

  Playground.prototype.renderVerdict = function () {
    var c = this.graph.checker, parts = this.key.split(" ");
    var who = parts[0] === "fix" ? "the fix (" + this.meta.fix + ")" : this.meta.model;
    var text = "The checker, for " + who + " at notify=" + parts[1] + " spurious=" + parts[2] + ": ";
    text += c.verdict === "ok" ? "ok, no interleaving reaches a violation" : c.verdict + " in " + c.trace.length + " steps";
    text += " (" + c.states + " states" + (c.exhaustive ? ", exhaustive" : ", not exhaustive") + ").";
    if (!this.graph.complete) text += " This page holds a bounded excerpt of the state graph.";
    this.verdictBox.textContent = text;
    this.verdictBox.setAttribute("data-verdict", c.verdict);
  };

  Playground.prototype.renderThreads = function (over) {
    var self = this, graph = this.graph, st = this.state();
    this.threadsBox.innerHTML = "";
    graph.threads.forEach(function (th, t) {
      var pc = st.values[self.pcIndex[t]];
      var place = graph.places[t][pc] || { step: pc, note: "" };
      var moves = st.moves.filter(function (m) { return m.thread === t; });
      var buttons = el("div", { cls: "pg-buttons" });
      moves.forEach(function (m) {
        var text = "step: " + m.step + (m.branch_name ? " [" + m.branch_name + "]" : "");
        var b = el("button", { type: "button", cls: "pg-step", "data-thread": th.name, "data-step": m.step,
                               "data-branch": String(m.branch), text: text });
        if (over || m.held || self.playing()) b.disabled = true;
        b.addEventListener("click", function () { self.byHand(m); self.take(m); });
        buttons.appendChild(b);
      });
      var why = st.blocked[th.name];
      if (why) buttons.appendChild(el("span", { cls: "pg-blocked", text: why }));
      if (place.note === "done") buttons.appendChild(el("span", { cls: "pg-done", text: "done" }));
      var list = el("ol", { cls: "pg-program" });
      graph.programs[th.role].forEach(function (step) {
        var current = step.label === place.step;
        var li = el("li", { cls: current ? "current" : "", "data-label": step.label,
                            text: step.label + (current && place.note ? " (" + place.note + ")" : "") });
        li.appendChild(el("span", { cls: "pg-kind", text: " " + step.kind + (step.objects.length ? " " + step.objects.join(", ") : "") }));
        list.appendChild(li);
      });
      var locals = el("ul", { cls: "pg-locals" });
      graph.fields.forEach(function (f, i) {
        if (f.indexOf(th.name + ".") === 0 && i !== self.pcIndex[t]) {
          locals.appendChild(el("li", { text: f.slice(th.name.length + 1) + " = " + st.shown[i] }));
        }
      });
      // Clicking the thread itself (its name or its program) steps it when it has exactly one step to take.
      var only = moves.length === 1 && !(over || moves[0].held || self.playing()) ? moves[0] : null;
      var head = el("h4", { text: th.name + " (" + th.role + ")" });
      if (only) {
        [head, list].forEach(function (part) {
          part.classList.add("pg-clickable");
          part.setAttribute("title", "click to step " + th.name + ": " + only.step);
          part.addEventListener("click", function () { self.byHand(only); self.take(only); });
        });
      }
      self.threadsBox.appendChild(el("section", { cls: "pg-thread", "data-thread": th.name }, [
        head, buttons, list, locals]));
    });
  };

  Playground.prototype.renderShared = function () {
    var graph = this.graph, st = this.state(), raw = {};
    this.sharedBox.innerHTML = "";
    var owned = graph.threads.map(function (t) { return t.name + "."; });
    graph.fields.forEach(function (f, i) {
      raw[f] = st.values[i];
      if (owned.some(function (p) { return f.indexOf(p) === 0; })) return;
      this.sharedBox.appendChild(el("tr", { "data-field": f }, [el("th", { text: f }), el("td", { text: st.shown[i] })]));
    }, this);
    this.raw.textContent = JSON.stringify(raw);
    this.raw.setAttribute("data-state", String(this.path[this.path.length - 1]));
  };

  Playground.prototype.renderLane = function (verdict) {
    var graph = this.graph, box = this.laneBox;
    box.innerHTML = "";
    box.appendChild(el("tr", {}, [el("th", { text: "#" })].concat(graph.threads.map(function (t) {
      return el("th", { text: t.name }); }))));
    this.choices.forEach(function (m, k) {
      var cells = graph.threads.map(function (t, i) {
        return el("td", { text: i === m.thread ? m.step + (m.branch_name ? " [" + m.branch_name + "]" : "") : "" });
      });
      box.appendChild(el("tr", { cls: m.violation ? "pg-bad" : "" }, [el("td", { text: String(k + 1) })].concat(cells)));
    });
    if (verdict.kind) {
      box.appendChild(el("tr", { cls: verdict.kind === "ok" ? "pg-good" : "pg-bad" }, [
        el("td", { colspan: String(graph.threads.length + 1), text: verdict.headline })]));
    }
  };

  // A picture of the whole graph: states by distance from the start, the current one and the
  // path so far highlighted. Drawn only where the page asks for it (the prefetcher's story).
  Playground.prototype.renderGraph = function () {
    var graph = this.graph, states = graph.states, depth = [0], order = [[0]], seen = { 0: true };
    for (var d = 0; d < order.length; d++) {
      var next = [];
      order[d].forEach(function (s) {
        states[s].moves.forEach(function (m) {
          if (typeof m.to === "number" && !seen[m.to]) { seen[m.to] = true; depth[m.to] = d + 1; next.push(m.to); }
        });
      });
      if (next.length) order.push(next);
    }
    var W = 16, H = 9, width = order.length * W + 20;
    var tallest = Math.max.apply(null, order.map(function (c) { return c.length; }));
    var pos = {};
    order.forEach(function (col, d) { col.forEach(function (s, i) { pos[s] = [10 + d * W, 10 + (i + (tallest - col.length) / 2) * H]; }); });
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + (tallest * H + 20));
    svg.setAttribute("class", "pg-graph-svg");
    var onPath = {};
    this.path.forEach(function (s) { onPath[s] = true; });
    states.forEach(function (st, s) {
      st.moves.forEach(function (m) {
        if (typeof m.to !== "number" || !pos[s] || !pos[m.to]) return;
        var line = document.createElementNS(ns, "line");
        line.setAttribute("x1", pos[s][0]); line.setAttribute("y1", pos[s][1]);
        line.setAttribute("x2", pos[m.to][0]); line.setAttribute("y2", pos[m.to][1]);
        line.setAttribute("class", onPath[s] && onPath[m.to] ? "pg-edge pg-on" : "pg-edge");
        svg.appendChild(line);
      });
    });
    var here = this.path[this.path.length - 1];
    Object.keys(pos).forEach(function (s) {
      var c = document.createElementNS(ns, "circle");
      c.setAttribute("cx", pos[s][0]); c.setAttribute("cy", pos[s][1]);
      c.setAttribute("r", Number(s) === here ? 4 : 2.5);
      c.setAttribute("class", Number(s) === here ? "pg-node pg-here" : onPath[s] ? "pg-node pg-on" : "pg-node");
      svg.appendChild(c);
    });
    this.graphBox.innerHTML = "";
    this.graphBox.appendChild(svg);
    this.graphBox.appendChild(el("p", { text: states.length + " states, " + order.length +
      " steps deep; the large dot is where you are, the dark ones the way you came." }));
  };

  // ------------------------------------------------------------- the index

  function fillProgress() {
    var all = readProgress();
    Array.prototype.forEach.call(document.querySelectorAll(".pg-progress"), function (span) {
      var how = all[span.getAttribute("data-model")];
      span.textContent = how === "found" ? "found it" : how === "shown" ? "watched" : "";
      span.setAttribute("data-progress", how || "");
    });
  }

  function boot() {
    fillProgress();
    Array.prototype.forEach.call(document.querySelectorAll(".pg-root"), function (root) {
      var game = new Playground(root);
      root.playground = game;
      game.start();
    });
  }

  window.SafeprefetchPlayground = Playground;
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
