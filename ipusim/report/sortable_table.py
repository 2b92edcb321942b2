"""Tables that sort by a click (or Enter) on a heading's button, in the browser.

A sortable table has the class ``sortable``; each heading to sort by holds a
``<button>`` (reached by the keyboard) and says its type in ``data-type``
(``number`` or ``text``); each cell keeps its raw value in ``data-sort`` (else its
text is the key). A table with ``data-sort-bodies`` sorts its ``<tbody>`` s by their
first rows (a row and the details under it move together), any other its rows.
Numbers sort largest first at the first click, words A to Z; empty numbers go last.
``window.ipusimSortTable(table, column, descending)`` sorts from a script.
"""
from __future__ import annotations

STYLE = """
table.sortable th button { all: unset; box-sizing: border-box; display: block; width: 100%;
                           padding: 0.3rem 0.5rem; cursor: pointer; text-align: inherit; }
table.sortable th button:focus-visible { outline: 2px solid #1f77b4; }
table.sortable th[aria-sort=ascending] button::after { content: " \\25B2"; font-size: 0.7em; }
table.sortable th[aria-sort=descending] button::after { content: " \\25BC"; font-size: 0.7em; }
"""

SCRIPT = """(function () {
  function cellKey(row, column, type) {
    var cell = row.cells[column], value = cell.getAttribute("data-sort");
    if (value === null) { value = cell.textContent; }
    if (type === "number") { return value === "" ? NaN : parseFloat(value); }
    return value.toLowerCase();
  }
  function sort(table, column, descending) {
    var header = table.tHead.rows[0].cells[column];
    var type = header.getAttribute("data-type");
    var bodies = table.hasAttribute("data-sort-bodies");
    var parent = bodies ? table : table.tBodies[0];
    var units = Array.prototype.slice.call(bodies ? table.tBodies : parent.rows);
    function key(unit) { return cellKey(bodies ? unit.rows[0] : unit, column, type); }
    units.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (type === "number") {  // empty cells last, whichever the direction
        if (isNaN(x) || isNaN(y)) { return isNaN(x) - isNaN(y); }
        return descending ? y - x : x - y;
      }
      var order = x.localeCompare(y, undefined, {numeric: true});
      return descending ? -order : order;
    });
    units.forEach(function (unit) { parent.appendChild(unit); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) {
      cell.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  window.ipusimSortTable = sort;
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell, column) {
      if (!cell.querySelector("button")) { return; }
      cell.addEventListener("click", function () {  // the button's click, or the heading's
        var was = cell.getAttribute("aria-sort");
        var first = cell.getAttribute("data-type") === "number" ? "descending" : "ascending";
        sort(table, column, was ? was === "ascending" : first === "descending");
      });
    });
  });
})();"""


__all__ = ["SCRIPT", "STYLE"]
