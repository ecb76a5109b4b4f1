#!/usr/bin/env python3
"""The README's first screen, read as a newcomer reads it, and its examples run as written.

  * The first screen of README.md (its first 45 lines) holds the two set-up commands, what
    they need (root or sudo, the Debian mirror, the minutes they take), the binary's path
    and the example between the markers `<!-- readme-example -->` and
    `<!-- /readme-example -->`.
  * That example runs as it stands, in a scratch folder whose ./build/linattn is the
    program under test, and prints what the README says it prints.
  * inputs/README.md's two Python snippets (making inputs with h5py, reading outputs) run
    as written around the `linattn run` its text gives, on outputs without --normalize.

Usage: readme_examples.py LINATTN_EXE REPO_ROOT WORKDIR. Exit 77 (skipped) when this
interpreter has no h5py. Standard library apart from h5py, which the examples need.
"""
import os
import re
import shutil
import subprocess
import sys

if len(sys.argv) != 4:
    sys.exit("usage: readme_examples.py LINATTN_EXE REPO_ROOT WORKDIR")
EXE, ROOT, WORK = (os.path.abspath(a) for a in sys.argv[1:])
try:
    import h5py  # noqa: F401  (the examples' python3 is this interpreter)
except ImportError:
    print("h5py is not importable: skipped")
    sys.exit(77)
FIRST_SCREEN = 45
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"  FAILED: {message}")


def shell(script, cwd):
    """Runs a bash script with -e; `python3` is this interpreter (it has h5py)."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


# 1. The first screen.
with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
screen = "\n".join(readme.split("\n")[:FIRST_SCREEN])
for needed in ("./run-tests.sh", "./run-example.sh", "root", "sudo", "Debian mirror", "minutes", "./build/linattn",
               "<!-- readme-example -->", "<!-- /readme-example -->"):
    check(needed in screen, f"README.md's first {FIRST_SCREEN} lines do not hold {needed!r}")

# 2. The example, as written.
block = re.search(r"<!-- readme-example -->\n```sh\n(.*?)```\n<!-- /readme-example -->\n", readme, re.S)
check(block is not None, "README.md holds no ```sh block between the readme-example markers")
said = re.search(r"<!-- /readme-example -->\n\nThe last line prints `([^`]*)`", readme)
check(said is not None, "README.md does not say what the example prints (\"The last line prints `...`\")")
if block:
    lines = [l for l in block.group(1).split("\n") if l.strip()]
    check(len(lines) <= 6, f"the example is {len(lines)} lines, not a short one")
    work = os.path.join(WORK, "first-run")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "build"))
    os.symlink(EXE, os.path.join(work, "build", "linattn"))
    r = shell(block.group(1), work)
    print(f"README example: exit {r.returncode}\n{r.stdout}{r.stderr}")
    check(r.returncode == 0, f"the README's example exited with {r.returncode}")
    printed = r.stdout.strip().split("\n")[-1] if r.stdout.strip() else ""
    if said:
        check(printed == said.group(1), f"the example printed {printed!r}, the README says {said.group(1)!r}")
    r = subprocess.run([EXE, "verify", "out/mine.h5"], cwd=work, capture_output=True, text=True)
    check(r.returncode == 0 and "verify: ok" in r.stdout, f"linattn verify out/mine.h5: {r.stdout}{r.stderr}")

# 3. inputs/README.md: make inputs, run as its text says, read an output back.
with open(os.path.join(ROOT, "inputs", "README.md")) as f:
    snippets = re.findall(r"```python\n(.*?)```", f.read(), re.S)
check(len(snippets) == 2, f"inputs/README.md holds {len(snippets)} python snippets, expected 2 (make, read)")
if len(snippets) == 2:
    work = os.path.join(WORK, "inputs-readme")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    r = shell("python3 - <<'EOF'\n" + snippets[0] + "EOF\n", work)
    check(r.returncode == 0, f"inputs/README.md's making snippet exited with {r.returncode}: {r.stderr}")
    # Its text: `linattn run mine.h5 -o out/` writes case0 and case1 and refuses case2 (a z_state without --normalize).
    r = subprocess.run([EXE, "run", "mine.h5", "-o", "out/"], cwd=work, capture_output=True, text=True)
    check(r.returncode == 1 and os.path.exists(os.path.join(work, "out", "mine.case0.h5")),
          f"linattn run mine.h5 -o out/ exited with {r.returncode}: {r.stdout}{r.stderr}")
    # The snippets are one session: the reading one uses the imports of the making one.
    r = shell("python3 - <<'EOF'\nimport h5py\nimport numpy as np\n" + snippets[1] + "EOF\n", work)
    check(r.returncode == 0, f"inputs/README.md's reading snippet, on an output without --normalize, exited with "
                             f"{r.returncode}: {r.stderr}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("ok")
