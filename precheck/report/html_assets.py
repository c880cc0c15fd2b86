"""The report page's style and script, inline in every report (it opens from file:// with no network).

The script reads the APIs from the page's embedded JSON and renders one page of the table at a time with
textContent only (text from a dump never becomes markup); it sorts on a header click, filters by status, family,
dtype and name (also from the page's query: ?status=error&sort=cosine&desc=1), and shows the row a scatter point
links to.
"""

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
.badge{color:#fff;border-radius:10px;padding:1px 9px;margin:0 3px;font-weight:600}
.grids{display:flex;gap:18px;flex-wrap:wrap;align-items:flex-start}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
.counts td{text-align:right}.options td{font-family:monospace}
#table th{cursor:pointer;background:#f4f4f4;user-select:none}#table th.sorted{background:#e0e8f5}
#table td.message{max-width:460px;word-break:break-word}#table tr.target{outline:3px solid #1565c0}
td.pass{color:#2e7d32}td.warning{color:#ef6c00}td.error{color:#c62828;font-weight:600}td.SKIP{color:#757575}
code{font-size:12px;background:#f6f6f6;display:block;margin-top:4px;word-break:break-all}
.filters{display:flex;gap:14px;align-items:center;margin:8px 0}.pager{margin:8px 0;display:flex;gap:10px}
.note{color:#555;font-size:13px}.finding{border-left:4px solid #ef6c00;padding:2px 12px;margin:10px 0}
svg .frame{fill:#fafafa;stroke:#999}svg .limit{stroke:#c62828;stroke-dasharray:5 4}
svg .tick{font-size:10px;fill:#555}svg .tick.end{text-anchor:end}svg .axis{font-size:12px;text-anchor:middle}
svg a.pt:hover circle,svg a.pt:hover rect{stroke:#000;stroke-width:2}
"""

SCRIPT = """
(function () {
  "use strict";
  var apis = JSON.parse(document.getElementById("apis").textContent);
  apis.forEach(function (a, i) { a.index = i; });
  var PAGE = 200, page = 0, key = null, descending = false, shown = apis;
  var body = document.querySelector("#table tbody");
  var pick = function (id) { return document.getElementById(id); };
  var rank = {error: 0, warning: 1, SKIP: 2, pass: 3, "": 4};

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
    if (key === "forward" || key === "backward") { x = rank[x]; y = rank[y]; }
    if (x === y) { return a.index - b.index; }
    if (x === null || x === undefined) { return 1; }
    if (y === null || y === undefined) { return -1; }
    return (x < y ? -1 : 1) * (descending ? -1 : 1);
  }
  function filter() {
    var status = pick("f-status").value, family = pick("f-family").value;
    var dtype = pick("f-dtype").value, text = pick("f-text").value.toLowerCase();
    shown = apis.filter(function (a) {
      return (!status || a.forward === status || a.backward === status) && (!family || a.family === family) &&
        (!dtype || a.dtype === dtype) && (!text || a.call.toLowerCase().indexOf(text) >= 0);
    });
    if (key) { shown = shown.slice().sort(compare); }
  }
  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(page, pages - 1);
    body.textContent = "";
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function (a) {
      var row = document.createElement("tr");
      row.id = "api-" + a.index;
      cell(row, a.call); cell(row, a.family);
      cell(row, a.forward, a.forward); cell(row, a.backward, a.backward);
      cell(row, a.dtype); cell(row, number(a.cosine)); cell(row, number(a.max_abs));
      var message = cell(row, a.message, "message");
      if (a.repro) {
        var code = document.createElement("code");
        code.textContent = a.repro;
        message.appendChild(code);
      }
      body.appendChild(row);
    });
    pick("count").textContent = shown.length + " of " + apis.length + " APIs";
    pick("page").textContent = "page " + (page + 1) + " of " + pages;
  }
  function update() { filter(); page = 0; draw(); }
  function reveal() {
    var match = /^#api-(\\d+)$/.exec(location.hash);
    if (!match) { return; }
    var at = shown.findIndex(function (a) { return a.index === Number(match[1]); });
    if (at < 0) { ["f-status", "f-family", "f-dtype", "f-text"].forEach(function (id) { pick(id).value = ""; });
      filter(); at = shown.findIndex(function (a) { return a.index === Number(match[1]); }); }
    if (at < 0) { return; }
    page = Math.floor(at / PAGE); draw();
    var row = document.getElementById("api-" + match[1]);
    document.querySelectorAll("tr.target").forEach(function (r) { r.classList.remove("target"); });
    row.classList.add("target"); row.scrollIntoView({block: "center"});
  }
  document.querySelectorAll("#table th").forEach(function (th) {
    function sort() {
      descending = key === th.dataset.key ? !descending : false;
      key = th.dataset.key;
      document.querySelectorAll("#table th").forEach(function (h) { h.classList.remove("sorted"); });
      th.classList.add("sorted");
      update();
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sort(); } });
  });
  ["f-status", "f-family", "f-dtype"].forEach(function (id) { pick(id).addEventListener("change", update); });
  pick("f-text").addEventListener("input", update);
  pick("prev").addEventListener("click", function () { if (page > 0) { page -= 1; draw(); } });
  pick("next").addEventListener("click", function () { page += 1; draw(); });
  window.addEventListener("hashchange", reveal);
  var query = new URLSearchParams(location.search);  // a shareable view: ?status=error&sort=cosine&desc=1
  [["status", "f-status"], ["family", "f-family"], ["dtype", "f-dtype"], ["name", "f-text"]].forEach(function (p) {
    if (query.has(p[0])) { pick(p[1]).value = query.get(p[0]); }
  });
  var wanted = (query.get("sort") || "").replace(/[^a-z_]/g, "");
  var sortBy = document.querySelector('#table th[data-key="' + wanted + '"]');
  if (sortBy) { key = sortBy.dataset.key; descending = query.get("desc") === "1"; sortBy.classList.add("sorted"); }
  update();
  reveal();
  document.body.dataset.ready = String(Math.round(performance.now()));
})();
"""
