// harel-jobs dashboard: the little JavaScript it has. Forms with data-confirm ask before
// they are sent; "select all" boxes tick the boxes of their table. Everything works
// without it, except that nothing asks first.
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
document.addEventListener("change", function (event) {
  var box = event.target;
  if (box.matches && box.matches("input[data-select-all]")) {
    var form = box.closest("form");
    form.querySelectorAll("input[name=id]").forEach(function (other) {
      other.checked = box.checked;
    });
  }
});
