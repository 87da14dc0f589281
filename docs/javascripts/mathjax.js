// MathJax configuration for pymdownx.arithmatex (generic mode), loaded before the vendored
// javascripts/mathjax/tex-chtml.js (mkdocs.yml, extra_javascript).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  }
};

// MathJax's startup typesets the first page itself. Resetting it then (clearCache + typesetClear)
// would drop the glyph styles of math already typeset and leave blank formulas, so the reset runs
// only for pages that Material swaps in later (navigation.instant), once MathJax is ready.
let firstDocument = true;
document$.subscribe(() => {
  if (firstDocument) {
    firstDocument = false;
    return;
  }
  MathJax.startup.promise.then(() => {
    MathJax.startup.output.clearCache();
    MathJax.typesetClear();
    MathJax.texReset();
    return MathJax.typesetPromise();
  });
});
