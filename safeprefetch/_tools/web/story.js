/*
 * "Is prefetching a boon here?": read a PrefetchStats.summary() the learner pastes, and say what it means.
 *
 * The rule is PrefetchStats' own (safeprefetch/_prefetcher/stats.py): a consumer that waited more than
 * 10% of the elapsed time means the source is the bottleneck; otherwise the consumer is. A consumer-bound
 * loop whose workers read for under 5% of its time had little for prefetching to hide, and is told so. The numbers are
 * read from the summary's three lines; tests/test_site_browser.py pastes a real run's summary and checks
 * that the page names the same bottleneck as the stats object did, so a change of format fails there.
 */
(function () {
  "use strict";
  var STARVED = 0.1;
  // Reading that takes less than this share of the loop's time is not worth hiding: the loop is all compute.
  var LITTLE = 0.05;
  var LINE1 = /(\d+) batches in ([\d.]+) s \(([\d.]+)\/s\); consumer waited ([\d.]+) s \(([\d.]+)%\)/;
  var LINE2 = /workers: (\d+), fetching ([\d.]+) s, blocked on a full buffer ([\d.]+) s; prefetch efficiency ([\d.]+)%/;
  var LINE3 = /buffer: capacity (\d+).*?occupancy mean ([\d.]+) max (\d+); bottleneck: (\w+)/;

  function parse(text) {
    var a = LINE1.exec(text), b = LINE2.exec(text), c = LINE3.exec(text);
    if (!a || !b || !c) return null;
    return { batches: +a[1], elapsed: +a[2], wait: +a[4], waitPct: +a[5], workers: +b[1], fetch: +b[2],
             blocked: +b[3], efficiency: +b[4], capacity: +c[1], mean: +c[2], max: +c[3], reported: c[4] };
  }

  function explain(s) {
    if (!s) {
      return { bottleneck: "", text: "This does not look like the output of print(pf.stats): expected its three " +
               "lines (\"... batches in ... s ...; consumer waited ...\", \"workers: ...\", \"buffer: ...\")." };
    }
    if (s.batches === 0) return { bottleneck: "none", text: "No batch was delivered yet: run the loop first." };
    var bottleneck = s.waitPct / 100 > STARVED ? "source" : "consumer";
    var hidden = Math.max(0, s.fetch - s.wait);
    var head = "Your loop waited " + s.waitPct + "% of the time (" + s.wait + " s of " + s.elapsed + " s). " +
               "The " + s.workers + " worker(s) spent " + s.fetch + " s reading; about " + hidden.toFixed(3) +
               " s of that was hidden behind your loop (prefetch efficiency " + s.efficiency + "%). ";
    if (bottleneck === "consumer" && s.fetch < LITTLE * s.elapsed) {
      return { bottleneck: bottleneck, reading: "little", text: "Prefetching does no harm here, but it has " +
        "little to hide. " + head + "Reading took under " + 100 * LITTLE + "% of the loop's time: the time is " +
        "in your own loop, and a plain loop over the source would be about as fast." };
    }
    if (bottleneck === "consumer") {
      return { bottleneck: bottleneck, reading: "hidden", text: "Yes, prefetching is a boon here. " + head +
        "Your own loop is the bottleneck: the workers sat " + s.blocked + " s on a full buffer, so more " +
        "workers would not help, and capacity " + s.capacity + " is enough (mean occupancy " + s.mean + ")." };
    }
    return { bottleneck: bottleneck, reading: "slow", text: "Prefetching helps, but not enough: the source is the bottleneck. " +
      head + "Add workers (you have " + s.workers + ") if the source serves requests in parallel, or make " +
      "each read cheaper; a larger capacity only helps with bursty reads." };
  }

  function run() {
    var input = document.getElementById("boon-input"), out = document.getElementById("boon-output");
    if (!input || !out) return;
    var said = explain(parse(input.value));
    out.innerHTML = "";
    var p = document.createElement("p");
    p.id = "boon-verdict";
    p.setAttribute("data-bottleneck", said.bottleneck);
    p.setAttribute("data-reading", said.reading || "");
    p.textContent = said.text;
    out.appendChild(p);
  }

  function boot() {
    var go = document.getElementById("boon-go");
    if (go) go.addEventListener("click", run);
    var input = document.getElementById("boon-input");
    if (input && input.value.trim()) run();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
