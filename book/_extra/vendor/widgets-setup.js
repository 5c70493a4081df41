// Loaded on pages with widgets, after require.js and before the widget
// manager (html-manager's embed-amd.js); see nb_ipywidgets_js in _config.yml.
// The book serves this file, like the manager, from <book>/vendor/.
(function () {
  "use strict";
  // 1. Fonts. Two of the AMD modules that embed-amd.js defines,
  // "@jupyter-widgets/html-manager" and
  // "@jupyter-widgets/html-manager/dist/libembed-amd", carry Font Awesome (the
  // widgets' icons) and look for its files in the folder of their own module
  // URL. Without a `paths` entry RequireJS puts those beside the page
  // (<page dir>/@jupyter-widgets/ and .../html-manager/dist/), where nothing
  // is. tools/vendor_js.py copies the fonts beside embed-amd.js, so point
  // both module URLs into that folder, as absolute URLs taken from this
  // script's own address (so it works at any page depth). Nothing is fetched
  // from these URLs: embed-amd.js defines both modules itself.
  var here = document.currentScript.src.replace(/[?#].*$/, "").replace(/[^/]*$/, "");
  window.require.config({
    paths: {
      "@jupyter-widgets/html-manager": here + "html-manager/html-manager",
      "@jupyter-widgets/html-manager/dist": here + "html-manager"
    }
  });

  // 2. MathJax. The manager typesets widget labels with MathJax 2's
  // MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book ships
  // MathJax 3 (sphinx-mathjax-offline), which has no Hub, so every labelled
  // widget threw "Cannot read properties of undefined (reading 'Queue')" in
  // the middle of its render. Give MathJax 3 the one call the manager makes,
  // chained on MathJax's own promise as its documentation asks. The manager
  // renders on "load"; MathJax (a deferred script) exists by DOMContentLoaded.
  window.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (!mj || mj.Hub || !mj.startup) return;
    mj.Hub = {
      Queue: function (command) {
        var element = command[2];
        mj.startup.promise = mj.startup.promise
          .then(function () { return mj.typesetPromise([element]); })
          .catch(function (err) { console.warn("MathJax could not typeset a widget label:", err); });
      }
    };
  });
})();
