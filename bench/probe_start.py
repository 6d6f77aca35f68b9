#!/usr/bin/env python3
"""The probe's start-up cost with its parser and constructor hooks (issue 39).

Each case is run without and with the probe, the same otherwise, the runs interleaved (without,
with; then with, without), in the same run of this script, the way oomguard starts a job: the
probe (src/probe/sitecustomize.py) alone in a private directory first on PYTHONPATH and the
write end of a pipe passed as a descriptor (tests/probe/check_probe.py's `job`, imported):

  (a) `python -c pass`;
  (b) a plain argparse script, `--batch_size 32 --gradient_accumulation_steps 4` parsed from its
      command line;
  (c) `import transformers.training_args` and `TrainingArguments(output_dir=tmp, report_to=[])`;
  (d) `import lightning.pytorch` and a `Trainer(...)` on the CPU;

(c) and (d) only where the package is importable. With PYTHONDONTWRITEBYTECODE=1 (the probe's
file compiled at every start, as in many images) and, for (a) and (b), also with the probe's
bytecode cached (what a job's later processes find once its first wrote __pycache__ into the
probe's directory). The parts of the probe compiled at a hook are compiled from text in every
process, cached or not.

Wall-clock (median and best of N, Popen to exit) is noisy on a loaded machine; the figures
taken inside the process are much less so:

  * `-X importtime`'s line for `sitecustomize` (the probe's whole start: compile or load, set-up),
    and the same for the probe before the hooks (git show 9f117f1:src/probe/sitecustomize.py,
    or --against FILE), the two interleaved;
  * time.perf_counter around the script's import of argparse / transformers / lightning and
    around parse_args / the construction, printed by the script, without and with the probe;
  * the probe's own time, in the process with the probe: its work when a watched module has
    loaded (the module's `_loaded`, timed from the script), inside its wrappers (the wrapper's
    `before`/`after`, timed), and its finder's calls (counted, times the cost of one call).

Standard library only; about 3 minutes on a loaded 2-CPU machine, most of it (c) and (d).
`python3 bench/probe_start.py [--light N] [--heavy N] [--no-heavy] [--probe FILE]
[--against FILE]` (--probe: another version of the probe measured in place of
src/probe/sitecustomize.py)."""
import argparse
import ast
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.dont_write_bytecode = True  # leave tests/probe/__pycache__ as it is
sys.path.insert(0, os.path.join(REPO, "tests", "probe"))
import check_probe  # noqa: E402  (the probe run the way oomguard runs it)

PY = sys.executable
PROBE_REL = "src/probe/sitecustomize.py"
BEFORE = "9f117f1"  # the probe's last commit before the parser and constructor hooks (issue 32)
IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|\s*sitecustomize$")

# Shared by the scripts of (b)-(d): times the probe's own work in the process that has it.
PRELUDE = r'''
import sys, time
_pc = time.perf_counter
R = {"probe": False, "loaded": {}, "loaded_ms": 0.0, "hook_ms": 0.0, "finds": 0}
# The probe's module leaves sys.modules (site.py's `sitecustomize` is the user's own, or none):
# its globals reached through its finder, first on sys.meta_path.
_G = next((type(f).find_spec.__globals__ for f in sys.meta_path
           if getattr(f, "_oomguard_probe", False)), {})
if _G.get("_quiet") is False:
    R["probe"] = True
    _orig_loaded = _G["_loaded"]
    _depth = [0]

    def _timed_loaded(name, module):
        _depth[0] += 1
        s = _pc()
        try:
            return _orig_loaded(name, module)
        finally:
            d = _pc() - s
            _depth[0] -= 1
            R["loaded"][name] = R["loaded"].get(name, 0.0) + d * 1e3
            if not _depth[0]:
                R["loaded_ms"] += d * 1e3

    _G["_loaded"] = _timed_loaded  # looked up in the probe's globals at each call
    _orig_find = _G["_OomguardProbeFinder"].find_spec

    def _counted_find(self, name, path=None, target=None):
        R["finds"] += 1
        return _orig_find(self, name, path, target)

    _G["_OomguardProbeFinder"].find_spec = _counted_find
    _orig_late = _G.get("_late")

    def _timed_late(*parts):
        s = _pc()
        try:
            return _orig_late(*parts)
        finally:
            R["late_ms"] = R.get("late_ms", 0.0) + (_pc() - s) * 1e3

    if _orig_late is not None:
        _G["_late"] = _timed_late  # the compile of the probe's text kept for later


def hook_timer(cls, attr):
    """The probe's wrapper of cls.attr: its `before` and `after` (the probe's own work) timed."""
    f = cls.__dict__.get(attr)
    if not R["probe"] or not getattr(f, "_oomguard_probe", False):
        return
    cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    for key in ("before", "after"):
        cell = cells.get(key)
        if cell is None or cell.cell_contents is None:
            continue
        fn = cell.cell_contents

        def timed(*a, _fn=fn, **k):
            s = _pc()
            try:
                return _fn(*a, **k)
            finally:
                R["hook_ms"] += (_pc() - s) * 1e3

        cell.cell_contents = timed


def timed(key, fn):
    s = _pc()
    out = fn()
    R[key] = (_pc() - s) * 1e3
    return out


def done():
    import json
    if R["probe"]:
        one = _G["_OomguardProbeFinder"]()
        n = 20000
        s = _pc()
        for _ in range(n):
            _orig_find(one, "oomguard_bench_unwatched", None, None)
        R["find_ns"] = (_pc() - s) / n * 1e9
        R["finds_ms"] = R["finds"] * R["find_ns"] / 1e6
        R["parts"] = list(_G.get("_compiled", ()))
        R.setdefault("late_ms", 0.0)
    print("OOMGUARD_BENCH " + json.dumps(R), flush=True)
'''

SCRIPTS = {
    "argparse": PRELUDE + r'''
argparse = timed("import_ms", lambda: __import__("argparse"))
parser = argparse.ArgumentParser()
parser.add_argument("-b", "--batch_size", type=int, default=64)
parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
parser.add_argument("--lr", type=float, default=3e-4)
hook_timer(argparse.ArgumentParser, "parse_known_args")
args = timed("call_ms", parser.parse_args)
assert (args.batch_size, args.gradient_accumulation_steps) == (32, 4), args
done()
''',
    "transformers": PRELUDE + r'''
def load():
    import transformers.training_args
    return transformers.training_args
ta = timed("import_ms", load)
hook_timer(ta.TrainingArguments, "__post_init__")
timed("call_ms", lambda: ta.TrainingArguments(output_dir=sys.argv[1], report_to=[]))
done()
''',
    "lightning": PRELUDE + r'''
def load():
    import lightning.pytorch
    return lightning.pytorch
pl = timed("import_ms", load)
hook_timer(pl.Trainer, "__init__")
timed("call_ms", lambda: pl.Trainer(logger=False, enable_checkpointing=False,
                                    enable_progress_bar=False, enable_model_summary=False,
                                    accelerator="cpu", devices=1, default_root_dir=sys.argv[1]))
done()
''',
}


class Bench(check_probe.ProbeTest):
    """check_probe's harness (its `job`), outside unittest."""

    def __init__(self):
        super().__init__()  # methodName "runTest": allowed to be absent


def q(xs):
    return (min(xs), statistics.median(xs)) if xs else (float("nan"), float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--light", type=int, default=12, help="pairs of runs for (a) and (b)")
    ap.add_argument("--heavy", type=int, default=2, help="pairs of runs for (c) and (d)")
    ap.add_argument("--no-heavy", action="store_true", help="leave out (c) and (d)")
    ap.add_argument("--probe", default=check_probe.PROBE_SRC,
                    help="the probe's file (another version of it, to compare)")
    ap.add_argument("--against", metavar="FILE",
                    help="another version of the probe whose start (a) is measured too, "
                         "interleaved; by default the one before the hooks (git show %s:%s)"
                         % (BEFORE, PROBE_REL))
    opts = ap.parse_args()

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # set per case below
    Bench.setUpClass()
    atexit.register(Bench.tearDownClass)  # the temporary directory, also on a failure
    b = Bench()
    tmp = b.tmp
    env_of = {"none": {"PYTHONDONTWRITEBYTECODE": "1"}, "cached": {}}
    against = opts.against
    if against is None:
        try:
            old = subprocess.run(["git", "-C", REPO, "show", "%s:%s" % (BEFORE, PROBE_REL)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
            against = os.path.join(tmp, "sitecustomize-%s.py" % BEFORE)
            with open(against, "wb") as f:
                f.write(old.stdout)
        except (OSError, subprocess.CalledProcessError):
            against = None
    # One probe directory per bytecode mode (and version): PYTHONDONTWRITEBYTECODE=1 only stops
    # the writing, so an uncached mode's directory must never have had a __pycache__.
    dirs = {"none": b.probe_dir, "cached": os.path.join(tmp, "probe-cached")}
    os.mkdir(dirs["cached"])
    for d in dirs.values():
        shutil.copyfile(opts.probe, os.path.join(d, "sitecustomize.py"))
    if against:
        for mode in ("none", "cached"):
            d = dirs[mode + "-against"] = os.path.join(tmp, "probe-against-" + mode)
            os.mkdir(d)
            shutil.copyfile(against, os.path.join(d, "sitecustomize.py"))
        env_of["none-against"], env_of["cached-against"] = env_of["none"], env_of["cached"]
    scripts = {}
    for name, text in SCRIPTS.items():
        scripts[name] = os.path.join(tmp, "job_%s.py" % name)
        with open(scripts[name], "w") as f:
            f.write(text)

    def run(argv, probe, mode, timeout=300):
        b.probe_dir = dirs[mode]
        start = time.perf_counter()
        r = b.job(argv, probe=probe, env=env_of[mode], timeout=timeout)
        took = time.perf_counter() - start
        if r.rc != 0:
            sys.exit("%s failed (%d):\n%s" % (argv, r.rc, r.err.decode(errors="replace")[-3000:]))
        if probe:
            errors = r.of("probe_error")
            if errors:
                sys.exit("the probe failed in %s: %s" % (argv, errors))
        got = None
        for line in r.out.decode().splitlines():
            if line.startswith("OOMGUARD_BENCH "):
                got = json.loads(line[len("OOMGUARD_BENCH "):])
        return took * 1e3, r, got

    # The cached directory's __pycache__, written once as a job's first process would.
    for mode in dirs:
        if mode.startswith("cached"):
            run([PY, "-c", "pass"], True, mode)
            assert os.path.isdir(os.path.join(dirs[mode], "__pycache__")), "no bytecode written"

    def pairs(argv, mode, n, timeout=300):
        """n pairs, interleaved: (without, with), then (with, without), ..."""
        out = {False: [], True: []}
        for i in range(n):
            for probe in ((False, True) if i % 2 == 0 else (True, False)):
                out[probe].append(run(argv, probe, mode, timeout))
        return out

    rows = []  # (case, bytecode, measure, without, with, difference, relative)
    events = {}
    load = [os.getloadavg()[0]]
    t_start = time.monotonic()
    ref = [reference(opts.probe)]

    def ms(x):
        return "%.1f" % x if abs(x) >= 10 else "%.2f" % x

    def cell(xs):
        lo, mid = q(xs)
        return "%s (%s)" % (ms(mid), ms(lo))

    def compare(case, mode, what, a, c):
        """A measure without (a) and with (c) the probe: medians (bests), their difference, the
        ratio of the medians."""
        (a0, a1), (c0, c1) = q(a), q(c)
        rows.append((case, mode, "%s, n=%d" % (what, len(a)), cell(a), cell(c),
                     "%+.2f (%+.2f)" % (c1 - a1, c0 - a0) if abs(c1 - a1) < 10
                     else "%+.1f (%+.1f)" % (c1 - a1, c0 - a0),
                     "×%.2f" % (c1 / a1)))

    def own(case, mode, what, c, wall):
        """The probe's own time, in the process with it; relative: its share of the median wall
        time without the probe."""
        rows.append((case, mode, "%s, n=%d" % (what, len(c)), "—", cell(c),
                     "+%s" % ms(statistics.median(c)),
                     "%.2f%% of the wall" % (100 * statistics.median(c) / wall)))

    def walls(got):
        return [t for t, _, _ in got[False]], [t for t, _, _ in got[True]]

    def inproc_rows(case, mode, got, call):
        a, c = walls(got)
        compare(case, mode, "wall (Popen to exit)", a, c)
        wall = statistics.median(a)
        for key, what in (("import_ms", "the import, perf_counter"), ("call_ms", call)):
            compare(case, mode, what, [g[key] for _, _, g in got[False]],
                    [g[key] for _, _, g in got[True]])
        w = [g for _, _, g in got[True]]
        names = sorted({k for g in w for k in g["loaded"]})
        own(case, mode, "probe: at the watched imports (%s)" % ", ".join(
            "%s %s" % (k, ms(statistics.median(g["loaded"].get(k, 0.0) for g in w)))
            for k in names), [g["loaded_ms"] for g in w], wall)
        own(case, mode, "probe: in its wrapper at the call", [g["hook_ms"] for g in w], wall)
        own(case, mode, "probe: of the two, compiling its late parts (%s)"
            % ", ".join(w[0]["parts"]), [g["late_ms"] for g in w], wall)
        own(case, mode, "probe: its finder, %d calls × %.0f ns"
            % (statistics.median(g["finds"] for g in w),
               statistics.median(g["find_ns"] for g in w)), [g["finds_ms"] for g in w], wall)

    # (a) python -c pass
    for mode in ("none", "cached"):
        case = "(a) `python -c pass`"
        got = pairs([PY, "-c", "pass"], mode, opts.light)
        a, c = walls(got)
        compare(case, mode, "wall (Popen to exit)", a, c)
        lines = {mode: [], mode + "-against": []}
        for i in range(opts.light):
            for which in sorted(lines, reverse=i % 2 == 1):
                if which not in dirs:
                    continue
                _, r, _ = run([PY, "-X", "importtime", "-c", "pass"], True, which)
                # The last: the probe's own (the one before it, nested, is its chaining to the
                # user's sitecustomize, which site.py looks for without the probe too).
                m = [IMPORTTIME.search(x) for x in r.err.decode().splitlines()]
                m = [x for x in m if x]
                assert m, r.err.decode()[-2000:]
                lines[which].append(int(m[-1].group(1)) / 1e3)
        own(case, mode, "probe: `-X importtime` line `sitecustomize`", lines[mode],
            statistics.median(a))
        if lines[mode + "-against"]:
            own(case, mode, "the same, the probe before the hooks (%s, %d lines)"
                % (os.path.basename(against), reference(against)[0][1]),
                lines[mode + "-against"], statistics.median(a))

    # (b) an argparse script
    for mode in ("none", "cached"):
        case = "(b) argparse script"
        argv = [PY, scripts["argparse"], "--batch_size", "32", "--gradient_accumulation_steps", "4"]
        got = pairs(argv, mode, opts.light)
        inproc_rows(case, mode, got, "parse_args, perf_counter")
        events[case] = sorted({e["event"] for e in got[True][0][1].events})
        if opts.probe == check_probe.PROBE_SRC:
            assert "option" in events[case], events[case]

    # (c), (d)
    heavy = (("(c) `TrainingArguments`", "transformers.training_args", "transformers"),
             ("(d) Lightning `Trainer`", "lightning.pytorch", "lightning"))
    skipped = []
    for case, module, key in heavy:
        if opts.no_heavy or opts.heavy < 1:
            skipped.append("%s: --no-heavy" % case)
            continue
        if not check_probe.importable(module.split(".")[0]):
            skipped.append("%s: %s not importable" % (case, module))
            continue
        out = tempfile.mkdtemp(dir=tmp)
        argv = [PY, scripts[key], out]
        got = pairs(argv, "none", opts.heavy, timeout=600)
        inproc_rows(case, "none", got, "the construction, perf_counter")
        events[case] = sorted({e["event"] for e in got[True][0][1].events})

    load.append(os.getloadavg()[0])
    ref.append(reference(opts.probe))

    print("The probe: %s (%d lines)." % (opts.probe, ref[0][0][1]))
    print("Python %s, %d CPUs; load average %.1f at the start, %.1f at the end; %.0f s."
          % (sys.version.split()[0], os.cpu_count(), load[0], load[1],
             time.monotonic() - t_start))
    print("This machine's speed, at the start and at the end (compile(), best of 5): the "
          "probe's file (%d lines) %.2f and %.2f ms; its late text, all parts (%d lines), "
          "%.1f and %.1f ms."
          % (ref[0][0][1], ref[0][0][0], ref[1][0][0], ref[0][1][1], ref[0][1][0],
             ref[1][1][0]))
    print("Times in ms, median (best) of n runs; differences: of the medians (of the bests). "
          "Bytecode: `none` = PYTHONDONTWRITEBYTECODE=1, the probe compiled at each start; "
          "`cached` = its __pycache__ written by an earlier process. Runs interleaved, without "
          "and with the probe.\n")
    print("| case | bytecode | measure | without the probe | with it | difference | relative |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %s |" % " | ".join(row))
    print()
    for case, kinds in events.items():
        print("events the probe sent in %s: %s" % (case, ", ".join(kinds)))
    for s in skipped:
        print("left out: %s" % s)


def reference(probe):
    """CPU figures for this machine now, in this process, best of 5 each: compiling the probe's
    file (what a start without its bytecode compiles) and its late text, all parts (what the
    hooks compile from text, part by part, in every process that reaches them)."""
    with open(probe) as f:
        text = f.read()
    late = None
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
                "_LATE"]:
            v = node.value.elts[-1] if isinstance(node.value, ast.Tuple) else node.value
            late = v.value if isinstance(v, ast.Constant) else None
    out = []
    for code in (text, late or ""):
        best = float("inf")
        for _ in range(5):
            s = time.perf_counter()
            compile(code, probe, "exec")
            best = min(best, time.perf_counter() - s)
        out.append((best * 1e3, code.count("\n")))
    return out


if __name__ == "__main__":
    main()
