#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_kube_schema.py BUILD - deploy/kubernetes/'s manifests checked
against the Kubernetes API's schema by kubernetes-models (an npm package
that ships the API's OpenAPI schema compiled into its models), installed
into BUILD/tools/kube by scripts/get-kube-models (make test does it), run
by test/kube/validate.mjs with the machine's Node.js. Broken copies of the
manifests must be rejected, so the check is seen to check.

Skipped, with the reason, where the package is not installed (no Node.js
or npm, or the npm registry out of reach).

Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why", one line each."""
import copy
import glob
import json
import os
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:  # Debian's Python has PyYAML (make test installs python3-yaml)
    if sys.executable != "/usr/bin/python3" and os.access("/usr/bin/python3", os.X_OK):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kube = os.path.abspath(os.path.join("build", "tools", "kube"))
CHECKS = ("deploy/kubernetes/*.yaml pass the Kubernetes API's schema (kubernetes-models)",
          "broken manifests are rejected: a string for a boolean, a pod without containers, "
          "an unknown kind")
failed = 0


def report(name, cond, detail=""):
    global failed
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail)[-900:] if not cond else ''}",
          flush=True)
    failed += not cond


def validate(items):
    """validate.mjs over [{file, doc}]: its exit status, its verdict of
    each ("valid" or "invalid"), its output."""
    shutil.copy(os.path.join(root, "test", "kube", "validate.mjs"), kube)
    r = subprocess.run(["node", os.path.join(kube, "validate.mjs")], input=json.dumps(items),
                       capture_output=True, text=True, timeout=60)
    verdicts = [line.split(" ", 1)[0] for line in r.stdout.splitlines()]
    return r.returncode, verdicts, r.stdout + r.stderr


def broken(items):
    """Copies of the manifests, each with one mistake the API refuses."""
    ds = next(copy.deepcopy(i["doc"]) for i in items if i["doc"]["kind"] == "DaemonSet")
    pod = next(copy.deepcopy(i["doc"]) for i in items if i["doc"]["kind"] == "Pod")
    ds["spec"]["template"]["spec"]["hostPID"] = "yes"
    del pod["spec"]["containers"]
    return [{"file": "hostPID-a-string", "doc": ds}, {"file": "no-containers", "doc": pod},
            {"file": "unknown-kind", "doc": dict(pod, kind="Podd")}]


def main():
    why = None
    if not shutil.which("node"):
        why = "no node (Node.js runs the schema check)"
    elif not os.path.isfile(os.path.join(kube, "installed")):
        why = (f"kubernetes-models is not installed in {kube} (scripts/get-kube-models, run "
               "by make test, needs node, npm and the npm registry)")
    if why:
        for name in CHECKS:
            print(f"skip {name}: {why}", flush=True)
        return 0
    files = sorted(glob.glob(os.path.join(root, "deploy", "kubernetes", "*.yaml")))
    items = [{"file": os.path.relpath(f, root), "doc": d}
             for f in files for d in yaml.safe_load_all(open(f)) if d]
    rc, verdicts, out = validate(items)
    report(CHECKS[0], rc == 0 and len(items) >= 2 and verdicts == ["valid"] * len(items), out)
    bad = broken(items)
    rc, verdicts, out = validate(bad)
    report(CHECKS[1], rc == 1 and verdicts == ["invalid"] * len(bad), out)
    print("".join(f"     {line}\n" for line in out.splitlines()), end="", flush=True)
    return 1 if failed else 0


sys.exit(main())
