"""Time the extension content script's render() (drawing the ghost) and caretState() (reading the prompt),
at an older commit (argv[1]) and in the working tree, in headless Chromium on the extension's fixture pages:
p50/p90 over 200 samples, each the mean of 10 calls.

    .venv/bin/python experiments/ghost_drawing_cost.py OLD_COMMIT

Each copy of content.js runs as a page script with a hook that exposes render() and caretState(); the
worker is never asked.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from serving_helpers import chromium, static_site  # noqa: E402

N = 200
GHOST = " report by Friday, please"
HOOK = """
  globalThis.__bench = {
    show(el, text) { box = el; current = { id: "b", base: "", text, taken: 0 }; },
    render, caretState: (el) => caretState(el),
  };
"""
MARK = "  // Dormant until the worker confirms"


def source(text: str) -> str:
    assert MARK in text
    head, tail = text.split(MARK)
    return head + HOOK + "})();\n"


old = source(subprocess.run(["git", "-C", str(REPO), "show", sys.argv[1] + ":extension/content.js"],
                            capture_output=True, text=True, check=True).stdout)
new = source((REPO / "extension/content.js").read_text())

SETUP = {
    "textarea": """
      const b = document.getElementById('body'); b.focus();
      b.value = 'Hi Dana,\\n\\nCould you send me the rep'; b.setSelectionRange(b.value.length, b.value.length);
      return b;""",
    "contenteditable": """
      const b = document.getElementById('body'); b.focus();
      b.firstElementChild.textContent = 'Hi Dana,';
      b.children[1].innerHTML = '<br>';
      const line = document.createElement('div'); line.textContent = 'Could you send me the rep';
      b.children[1].after(line);
      const r = document.createRange(); r.setStart(line.firstChild, line.firstChild.length); r.collapse(true);
      getSelection().removeAllRanges(); getSelection().addRange(r);
      return b;""",
}
TIME = """
  const [el, ghost, n, k] = arguments;  // n samples, each the mean of k calls (the clock ticks in 0.1 ms)
  const q = (xs) => {
    xs.sort((a, b) => a - b);
    return [0.5, 0.9].map((f) => +xs[Math.floor(xs.length * f)].toFixed(3));
  };
  const render = [], prompt = [];
  for (let i = 0; i < n; i++) {
    let spent = 0;
    for (let j = 0; j < k; j++) {
      __bench.show(el, ghost.slice((i * k + j) % 6));  // as when typing through: a shorter ghost each time
      const t = performance.now();
      __bench.render();
      void document.documentElement.offsetHeight;  // the layout it leaves dirty, paid now
      spent += performance.now() - t;
    }
    render.push(spent / k);
    const t = performance.now();
    for (let j = 0; j < k; j++) __bench.caretState(el);
    prompt.push((performance.now() - t) / k);
  }
  return { render: q(render), prompt: q(prompt) };
"""

results = {}
with static_site(REPO / "tests/extension_fixtures") as site:
    for name, code in (("old", old), ("new", new)):
        driver = chromium(Path(tempfile.mkdtemp()))
        try:
            for kind, page in (("textarea", "textarea.html"), ("contenteditable", "editor.html")):
                driver.get(f"{site}/{page}")
                driver.execute_script(code)
                el = driver.execute_script(SETUP[kind])
                driver.execute_script(TIME, el, GHOST, 20, 10)  # warm up
                results[f"{name} {kind}"] = driver.execute_script(TIME, el, GHOST, N, 10)
        finally:
            driver.quit()
for key, r in results.items():
    print(f"{key:26s} render p50 {r['render'][0]:.3f} p90 {r['render'][1]:.3f} ms   "
          f"caretState p50 {r['prompt'][0]:.3f} p90 {r['prompt'][1]:.3f} ms")
