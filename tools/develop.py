"""Makes `import thunder` work from any directory in this interpreter, as an editable install does:
writes thunder-dev.pth (the absolute path of python/) into site-packages (or the user site when
site-packages is not writable), then checks the import from another directory."""

import os
import site
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG_DIR = os.path.join(ROOT, "python")


def main() -> int:
    candidates = [sysconfig.get_paths()["purelib"]]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    for d in candidates:
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "thunder-dev.pth"), "w") as f:
                f.write(PKG_DIR + "\n")
            break
        except OSError:
            continue
    else:
        print("develop: no writable site-packages; set PYTHONPATH=" + PKG_DIR, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as cwd:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run(
            [sys.executable, "-c", "import thunder, os; print(os.path.dirname(thunder.__file__))"],
            cwd=cwd, env=env, capture_output=True, text=True,
        )
    where = r.stdout.strip()
    if r.returncode != 0:
        print("develop: `import thunder` fails outside the tree:\n" + r.stderr, file=sys.stderr)
        return 1
    if os.path.realpath(where) != os.path.realpath(os.path.join(PKG_DIR, "thunder")):
        print(f"develop: `import thunder` finds {where}, an installed copy that shadows this tree; "
              f"`pip uninstall thunder` to use the tree", file=sys.stderr)
        return 1
    print(f"develop: `import thunder` works from any directory ({os.path.join(d, 'thunder-dev.pth')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
