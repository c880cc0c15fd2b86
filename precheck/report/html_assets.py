"""The report pages' style and script, inline in every report (it opens from file:// with no network).

One table script serves the run report (a row per API) and the compare report (a row per record): it reads the
rows from the page's embedded JSON (``<script id="rows">``), takes its columns from the table's headers
(``data-key``, ``data-kind``: text, number, status, message) and its filters from the elements marked
``data-filter`` (the fields a value must match, or ``text`` for a substring of the first column), and renders one
page of rows at a time with textContent only (text from a dump never becomes markup). It sorts on a header click,
takes filters and the sort from the page's query (``?status=error&sort=cosine&desc=1``), and shows the row a
plotted point links to (``#<prefix><index>``).

The colours and the sort order of a status cell are precheck/schema.py's (COLOURS, WORST_FIRST); a compare
verdict takes those of the status it is like (suspect an error, agree a pass).
"""

import json

from precheck.schema import COLOURS, WORST_FIRST, Status

# A compare verdict's cell is sorted, and coloured, as the status it is like (precheck.compare.divergence's
# verdicts); inherited keeps a colour of its own, unmatched, unreadable and undefined (nothing compared) sort after
# SKIP.
LIKE = {"suspect": Status.ERROR, "amplified": Status.WARNING, "inherited": Status.SKIP, "agree": Status.PASS}
_OWN = {
    "inherited": "#6d4c41",
    "unmatched": COLOURS[Status.SKIP],
    "unreadable": COLOURS[Status.SKIP],
    "undefined": COLOURS[Status.SKIP],
}
_BOLD = (Status.ERROR, "suspect", "amplified")


def _status_rules() -> str:
    colours = COLOURS | {v: COLOURS[s] for v, s in LIKE.items()} | _OWN
    return "".join(f"td.{k}{{color:{c}{';font-weight:600' if k in _BOLD else ''}}}" for k, c in colours.items())


def _ranks() -> str:
    ranks = {s: 2 * i for i, s in enumerate(WORST_FIRST)}
    after_skip = ranks[Status.SKIP] + 1
    return json.dumps(ranks | {v: ranks[s] for v, s in LIKE.items()} | dict.fromkeys(_OWN, after_skip)
                      | {"inherited": ranks[Status.SKIP], "": 2 * len(WORST_FIRST)})  # fmt: skip


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
.badge{color:#fff;border-radius:10px;padding:1px 9px;margin:0 3px;font-weight:600}
.grids{display:flex;gap:18px;flex-wrap:wrap;align-items:flex-start}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
.counts td{text-align:right}.options td{font-family:monospace}
#table th{cursor:pointer;background:#f4f4f4;user-select:none}#table th.sorted{background:#e0e8f5}
#table[data-prefix="rec-"] td:nth-child(1),#table[data-prefix="rec-"] td:nth-child(9)
{max-width:250px;overflow-wrap:anywhere}
#table td.message{max-width:460px;word-break:break-word}#table tr.target{outline:3px solid #1565c0}
STATUS_RULES
code{font-size:12px;background:#f6f6f6;display:block;margin-top:4px;word-break:break-all}
.filters{display:flex;gap:14px;align-items:center;margin:8px 0}.pager{margin:8px 0;display:flex;gap:10px}
.partial{border-left:4px solid ERROR_COLOUR;padding:2px 12px;font-weight:bold}
.note{color:#555;font-size:13px}.finding{border-left:4px solid WARNING_COLOUR;padding:2px 12px;margin:10px 0}
svg .frame{fill:#fafafa;stroke:#999}svg .limit{stroke:ERROR_COLOUR;stroke-dasharray:5 4}
svg .tick{font-size:10px;fill:#555}svg .tick.end{text-anchor:end}svg .axis{font-size:12px;text-anchor:middle}
svg polyline.deviation{fill:none;stroke:#9e9e9e;stroke-width:1}
svg polyline.cos{fill:none;stroke:#1565c0;stroke-width:1.2}
svg a.pt:hover circle,svg a.pt:hover rect{stroke:#000;stroke-width:2}
.plots{display:flex;gap:12px;flex-wrap:wrap}.plots svg{flex:1 1 520px;max-width:760px;height:auto}
"""
STYLE = (
    _STYLE.replace("STATUS_RULES", _status_rules())
    .replace("WARNING_COLOUR", COLOURS[Status.WARNING])
    .replace("ERROR_COLOUR", COLOURS[Status.ERROR])
)

_SCRIPT = """
(function () {
  "use strict";
  var rows = JSON.parse(document.getElementById("rows").textContent);
  rows.forEach(function (a, i) { a.index = i; });
  var table = document.getElementById("table"), prefix = table.dataset.prefix;
  var columns = Array.prototype.map.call(table.querySelectorAll("th"), function (th) {
    return {key: th.dataset.key, kind: th.dataset.kind};
  });
  var first = columns[0].key, filters = document.querySelectorAll("[data-filter]");
  var PAGE = 200, page = 0, key = null, kind = null, descending = false, shown = rows;
  var body = table.querySelector("tbody");
  var pick = function (id) { return document.getElementById(id); };
  var rank = STATUS_RANKS;

  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) { td.className = cls; }
    row.appendChild(td);
    return td;
  }
  function number(v) { return v === null || v === undefined ? "" : Number(v).toPrecision(6); }
  function compare(a, b) {
    var x = a[key], y = b[key];
    if (kind === "status") { x = rank[x]; y = rank[y]; }
    if (x === y) { return a.index - b.index; }
    if (x === null || x === undefined) { return 1; }
    if (y === null || y === undefined) { return -1; }
    return (x < y ? -1 : 1) * (descending ? -1 : 1);
  }
  function keep(a, element) {
    var value = element.value;
    if (!value) { return true; }
    if (element.dataset.filter === "text") {
      return String(a[first]).toLowerCase().indexOf(value.toLowerCase()) >= 0;
    }
    return element.dataset.filter.split(" ").some(function (f) { return String(a[f]) === value; });
  }
  function filter() {
    shown = rows.filter(function (a) {
      return Array.prototype.every.call(filters, function (element) { return keep(a, element); });
    });
    if (key) { shown = shown.slice().sort(compare); }
  }
  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(page, pages - 1);
    body.textContent = "";
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function (a) {
      var row = document.createElement("tr");
      row.id = prefix + a.index;
      columns.forEach(function (c) {
        var v = a[c.key];
        if (c.kind === "number") { cell(row, number(v)); return; }
        if (c.kind === "status") { cell(row, v, v); return; }
        var td = cell(row, v, c.kind === "message" ? "message" : "");
        if (c.kind === "message" && a.repro) {
          var code = document.createElement("code");
          code.textContent = a.repro;
          td.appendChild(code);
        }
      });
      body.appendChild(row);
    });
    pick("count").textContent = shown.length + " of " + rows.length + " " + table.dataset.noun;
    pick("page").textContent = "page " + (page + 1) + " of " + pages;
  }
  function update() { filter(); page = 0; draw(); }
  function reveal() {
    var match = new RegExp("^#" + prefix + "(\\\\d+)$").exec(location.hash);
    if (!match) { return; }
    var wanted = Number(match[1]);
    var at = shown.findIndex(function (a) { return a.index === wanted; });
    if (at < 0) { filters.forEach(function (element) { element.value = ""; });
      filter(); at = shown.findIndex(function (a) { return a.index === wanted; }); }
    if (at < 0) { return; }
    page = Math.floor(at / PAGE); draw();
    var row = document.getElementById(prefix + match[1]);
    document.querySelectorAll("tr.target").forEach(function (r) { r.classList.remove("target"); });
    row.classList.add("target"); row.scrollIntoView({block: "center"});
  }
  table.querySelectorAll("th").forEach(function (th) {
    function sort() {
      descending = key === th.dataset.key ? !descending : false;
      key = th.dataset.key; kind = th.dataset.kind;
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted"); });
      th.classList.add("sorted");
      update();
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sort(); } });
  });
  filters.forEach(function (element) {
    element.addEventListener(element.tagName === "INPUT" ? "input" : "change", update);
  });
  pick("prev").addEventListener("click", function () { if (page > 0) { page -= 1; draw(); } });
  pick("next").addEventListener("click", function () { page += 1; draw(); });
  window.addEventListener("hashchange", reveal);
  var query = new URLSearchParams(location.search);  // a shareable view: ?status=error&sort=cosine&desc=1
  filters.forEach(function (element) {
    if (query.has(element.dataset.query)) { element.value = query.get(element.dataset.query); }
  });
  var wanted = (query.get("sort") || "").replace(/[^a-z_]/g, "");
  var sortBy = table.querySelector('th[data-key="' + wanted + '"]');
  if (sortBy) {
    key = sortBy.dataset.key; kind = sortBy.dataset.kind; descending = query.get("desc") === "1";
    sortBy.classList.add("sorted");
  }
  update();
  reveal();
  document.body.dataset.ready = String(Math.round(performance.now()));
})();
"""
SCRIPT = _SCRIPT.replace("STATUS_RANKS", _ranks())
