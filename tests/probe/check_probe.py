#!/usr/bin/env python3
"""The probe (src/probe/sitecustomize.py) run the way oomguard runs it: its file written into a
private directory put first on PYTHONPATH, the write end of a pipe passed as descriptor n (5
here) with OOMGUARD_PROBE_FD=n, OOMGUARD_PROBE_PIPE=<the pipe's inode> and
OOMGUARD_PROBE_DIR=<the directory>; the events read from the pipe's other end.

Real commands on the CPU: a plain torch loop, Hugging Face Trainer, LightningCLI, a worker
spawned with subprocess.Popen, users' own sitecustomize modules, stand-ins for an old and a
broken torch; where jobs keep their batch (argparse scripts, HfArgumentParser, TrainingArguments
and TRL's SFTConfig, Lightning's Trainer and DataModule, DataLoaders), and the batch set inside
them with OOMGUARD_PROBE_SET. Standard library only; run with
`python3 tests/probe/check_probe.py -v`."""
import glob
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE_SRC = os.path.join(REPO, "src", "probe", "sitecustomize.py")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "probe")
LIGHTNING_JOB = os.path.join(REPO, "tests", "fixtures", "lightning_cli_job.py")
PY = sys.executable
PIPE_BUF = 4096
# The fields a "framework" event names, by row.
HF_FIELDS = {"batch_field": "per_device_train_batch_size",
             "accum_field": "gradient_accumulation_steps"}
LIGHTNING_FIELDS = {"batch_field": "batch_size", "accum_field": "accumulate_grad_batches"}


def fixture(name):
    return os.path.join(FIXTURES, name)


def lightning_cli(root):
    """LightningCLI on the CPU: 4 micro-batches of 1 with accumulate_grad_batches 2, logs in root."""
    return [PY, LIGHTNING_JOB, "fit", "--trainer.logger", "false",
            "--trainer.default_root_dir", root, "--trainer.accelerator", "cpu",
            "--trainer.max_epochs", "1", "--trainer.accumulate_grad_batches", "2",
            "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar", "false",
            "--trainer.enable_model_summary", "false",
            "--data.batch_size", "1", "--data.samples", "4", "--data.sample_mb", "1"]


def free_fd(first=5, last=9):
    for fd in range(first, last + 1):
        try:
            os.fstat(fd)
        except OSError:
            return fd
    raise RuntimeError("no free descriptor in %d..%d" % (first, last))


def payload(event):
    """An event without what every event carries (its kind, pid, rank and time)."""
    return {k: v for k, v in event.items() if k not in ("event", "pid", "rank", "t")}


def line_of(path, text):
    """path:N's N: the line of path that holds text (once)."""
    with open(path) as f:
        lines = [n for n, line in enumerate(f, 1) if text in line]
    assert len(lines) == 1, (path, text, lines)
    return lines[0]


def importable(name):
    return importlib.util.find_spec(name) is not None


class Run:
    def __init__(self, rc, out, err, data, pid, ino):
        self.rc, self.out, self.err, self.data, self.pid, self.ino = rc, out, err, data, pid, ino
        self.events = []
        if data:
            assert data.endswith(b"\n"), "the last event is not a whole line: %r" % data[-200:]
            for line in data.split(b"\n")[:-1]:
                assert len(line) + 1 < PIPE_BUF, "an event of %d bytes" % (len(line) + 1)
                self.events.append(json.loads(line))

    def of(self, kind, pid=None):
        return [e for e in self.events if e["event"] == kind and (pid is None or e["pid"] == pid)]

    def steps(self, pid=None):
        return [e["step"] for e in self.of("step", pid)]


class ProbeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="oomguard-probe-test-")
        # As oomguard does: the probe's file alone in a private directory.
        cls.probe_dir = os.path.join(cls.tmp, "probe")
        os.mkdir(cls.probe_dir)
        shutil.copyfile(PROBE_SRC, os.path.join(cls.probe_dir, "sitecustomize.py"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def mkdtemp(self):
        return tempfile.mkdtemp(dir=self.tmp)

    def job(self, argv, probe=True, pythonpath=(), env=None, channel=True, fill=False,
            reader=True, cwd=None, timeout=120):
        """Run argv with the probe (probe=False: without it, the same otherwise) and a channel
        pipe passed as descriptor 5 (channel=False: none). fill: the pipe is full before the job
        starts; reader=False: its read end is closed before the job starts."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("OOMGUARD_")}
        e.pop("PYTHONPATH", None)
        e.update(env or {})
        path = ([self.probe_dir] if probe else []) + list(pythonpath)
        if path:
            e["PYTHONPATH"] = os.pathsep.join(path)
        r = n = ino = None
        pass_fds = ()
        if channel:
            r, w = os.pipe()
            n = free_fd()
            os.dup2(w, n)  # inheritable, as oomguard passes it
            os.close(w)
            ino = os.fstat(n).st_ino
            if fill:
                os.set_blocking(n, False)
                try:
                    while True:
                        os.write(n, b"x" * 4096)
                except BlockingIOError:
                    pass
                os.set_blocking(n, True)
            if not reader:
                os.close(r)
                r = None
            if probe:
                e.update(OOMGUARD_PROBE_FD=str(n), OOMGUARD_PROBE_PIPE=str(ino),
                         OOMGUARD_PROBE_DIR=self.probe_dir)
            pass_fds = (n,)
        chunks = []
        thread = None
        try:
            proc = subprocess.Popen(argv, env=e, cwd=cwd or self.tmp, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=pass_fds)
        finally:
            if n is not None:
                os.close(n)
        if r is not None and not fill:
            def read():
                while True:
                    chunk = os.read(r, 65536)
                    if not chunk:
                        return
                    chunks.append(chunk)
            thread = threading.Thread(target=read, daemon=True)
            thread.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.fail("%s ran past %d s; stderr:\n%s" % (argv, timeout, err.decode(errors="replace")))
        if thread is not None:
            thread.join(30)
            self.assertFalse(thread.is_alive(), "the channel stayed open after the job")
        if r is not None:
            os.close(r)
        return Run(proc.returncode, out, err, b"".join(chunks), proc.pid, ino)

    def assertRan(self, run):
        self.assertEqual(run.rc, 0, run.err.decode(errors="replace")[-3000:])

    def assertRateLimited(self, run, pid):
        """After the first three, a step event comes at least 0.5 s after the one before (the
        last, written at exit, may come sooner): read from the events' own times, so a slow,
        loaded machine that sends more of them still passes."""
        events = run.of("step", pid)
        for before, after in zip(events[2:-2], events[3:-1]):
            self.assertGreaterEqual(after["t"] - before["t"], 0.45, events)

    def assertStepEvents(self, run, pid, last):
        """Counts from 1, every one of the first three, rising, ending at `last`; the fields of
        a step event on the CPU."""
        steps = run.steps(pid)
        self.assertEqual(steps[: min(3, last)], list(range(1, min(3, last) + 1)), run.events)
        self.assertEqual(steps[-1], last, run.events)
        self.assertEqual(steps, sorted(set(steps)), run.events)
        for e in run.of("step", pid):
            self.assertGreater(e["rss_peak_bytes"], 0, e)
            self.assertIsInstance(e["t"], float)
            self.assertFalse([k for k in e if k.startswith("cuda")], e)  # no GPU here
        hooked = run.of("hooked", pid)
        self.assertEqual(len(hooked), 1, run.events)
        self.assertIsInstance(hooked[0]["cuda"], bool)
        self.assertTrue(hooked[0]["torch"][0].isdigit(), hooked)

    # --- 1-3: the frameworks ------------------------------------------------------------

    def test_01_torch_loop(self):
        """A plain torch loop, 12 steps of 0.1 s: steps 1-3, at most one event per 0.5 s, the
        last count (12) at exit; the rank from SLURM_PROCID where RANK is not set."""
        start = time.monotonic()
        run = self.job([PY, fixture("torch_loop.py"), "--steps", "12", "--sleep", "0.1"],
                       env={"SLURM_PROCID": "2", "LOCAL_RANK": "1"})
        took = time.monotonic() - start
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 12)
        steps = run.of("step")
        self.assertLessEqual(len(steps), 3 + int(took / 0.5) + 2, steps)
        self.assertRateLimited(run, run.pid)
        peaks = [e["rss_peak_bytes"] for e in steps]
        self.assertEqual(peaks, sorted(peaks))
        self.assertEqual({e["rank"] for e in run.events}, {2})
        self.assertEqual({e["pid"] for e in run.events}, {run.pid})
        self.assertEqual(run.events[0]["event"], "hooked")
        self.assertEqual(run.err, b"")
        # Without the sleep: 1, 2, 3, perhaps one more, and the last count at exit.
        run = self.job([PY, fixture("torch_loop.py"), "--steps", "40"], env={"RANK": "7"})
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 40)
        self.assertRateLimited(run, run.pid)
        # Only the count written at exit is marked (its peaks are no completed step's).
        steps = run.of("step")
        self.assertEqual([e for e in steps[:-1] if e.get("exit")], [], steps)
        if steps[-1].get("exit"):
            self.assertEqual((steps[-1]["step"], steps[-1]["exit"]), (40, True), steps)
        self.assertEqual({e["rank"] for e in run.events}, {7})

    def test_02_hf_trainer(self):
        """Hugging Face Trainer, max_steps 3 with gradient_accumulation_steps 2: 3 steps."""
        run = self.job([PY, fixture("hf_trainer_job.py"), self.mkdtemp()], timeout=180)
        self.assertRan(run)
        self.assertIn(b"trainer done", run.out)
        self.assertStepEvents(run, run.pid, 3)
        self.assertEqual(run.steps(), [1, 2, 3])

    def test_03_lightning_cli(self):
        """LightningCLI, 4 micro-batches with accumulate_grad_batches 2: 2 steps."""
        root = self.mkdtemp()
        run = self.job(lightning_cli(root), timeout=180)
        self.assertRan(run)
        self.assertEqual(run.out.count(b"holds"), 4, run.out)  # 4 micro-batches ran
        self.assertStepEvents(run, run.pid, 2)
        self.assertEqual(run.steps(), [1, 2])
        # jsonargparse parses without argparse's parse_known_args: no "option" events; the
        # Trainer LightningCLI builds says the batch and accumulation at fit.
        self.assertEqual(run.of("option"), [], run.events)
        (fw,) = run.of("framework")
        where = "%s:%d" % (LIGHTNING_JOB, line_of(LIGHTNING_JOB, "LightningCLI(Model"))
        self.assertEqual(payload(fw), dict(LIGHTNING_FIELDS, row="lightning", batch=1, accum=2,
                                           set=False, where=where, **{"class": "Trainer"}))

    # --- 4: a worker without the descriptor ---------------------------------------------

    def test_04_popen_worker(self):
        """A worker spawned with subprocess.Popen(close_fds=True) reports through its
        parent's /proc/<pid>/fd/<n>; the parent, which never imports torch, sends nothing."""
        run = self.job([PY, fixture("popen_parent.py")])
        self.assertRan(run)
        worker = json.loads(run.out)["pid"]
        self.assertNotEqual(worker, run.pid)
        self.assertStepEvents(run, worker, 2)
        self.assertEqual({e["pid"] for e in run.events}, {worker})

    # --- 5: the user's own sitecustomize ------------------------------------------------

    def user_site(self, body):
        d = self.mkdtemp()
        with open(os.path.join(d, "sitecustomize.py"), "w") as f:
            f.write(body)
        return d

    def test_05a_user_sitecustomize_runs(self):
        """A user's sitecustomize after the probe's directory still runs, once, as module
        `sitecustomize`; sys.path is the one the job has without the probe."""
        marker = os.path.join(self.mkdtemp(), "marker")
        site = self.user_site(
            "import os, sys\n"
            "with open(os.environ['USER_SITE_MARKER'], 'a') as f:\n"
            "    f.write('%s %s\\n' % (__name__, sys.modules['sitecustomize'] is sys.modules[__name__]))\n"
            "USER_SITE = True\n")
        env = {"USER_SITE_MARKER": marker}
        show = ("import sys, sitecustomize; print(sitecustomize.__file__, "
                "getattr(sitecustomize, 'USER_SITE', False)); print(sys.path)")
        with_probe = self.job([PY, "-c", show], pythonpath=[site], env=env)
        without = self.job([PY, "-c", show], probe=False, pythonpath=[site], env=env)
        self.assertRan(with_probe)
        self.assertEqual(with_probe.out, without.out)
        self.assertIn(("%s True" % os.path.join(site, "sitecustomize.py")).encode(), with_probe.out)
        with open(marker) as f:
            self.assertEqual(f.read(), "sitecustomize True\n" * 2)
        # ... and the probe still reports.
        os.unlink(marker)
        run = self.job([PY, fixture("torch_loop.py"), "--steps", "2"], pythonpath=[site], env=env)
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 2)
        with open(marker) as f:
            self.assertEqual(f.read(), "sitecustomize True\n")

    def test_05b_user_sitecustomize_raises(self):
        """A user's sitecustomize that raises: site.py's message and the job go on exactly as
        without the probe, and the probe still reports."""
        for body in ("raise RuntimeError('the user site broke')\n",
                     "import no_such_module_of_the_user\n"):
            site = self.user_site(body)
            argv = [PY, "-c", "print('job ran')"]
            with_probe = self.job(argv, pythonpath=[site])
            without = self.job(argv, probe=False, pythonpath=[site])
            self.assertRan(with_probe)
            self.assertEqual(with_probe.out, b"job ran\n")
            self.assertIn(b"Error in sitecustomize; set PYTHONVERBOSE for traceback", without.err)
            self.assertEqual((with_probe.rc, with_probe.out, with_probe.err),
                             (without.rc, without.out, without.err))
        run = self.job([PY, fixture("torch_loop.py"), "--steps", "2"], pythonpath=[site])
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 2)

    # --- 6: output untouched ------------------------------------------------------------

    def test_06_output_identical(self):
        """stdout and stderr byte-identical with and without the probe."""
        argv = [PY, fixture("print_text.py")]
        with_probe = self.job(argv)
        without = self.job(argv, probe=False)
        self.assertRan(with_probe)
        self.assertEqual(with_probe.out, without.out)
        self.assertEqual(with_probe.err, without.err)
        self.assertIn("日本語".encode(), with_probe.out)
        self.assertStepEvents(with_probe, with_probe.pid, 5)

    # --- 7: a probe that fails ----------------------------------------------------------

    def test_07_probe_fails(self):
        """An old torch without the global step hook, and a torch whose hook fails: one
        probe_error, nothing else, the job's exit status and output unchanged."""
        argv = [PY, "-c", "import torch, sys; print(torch.__version__); sys.exit(3)"]
        for fake, where, says in (("old_torch", "register_optimizer_step_post_hook", "1.12.1"),
                                  ("broken_torch", "hook", "hooks are broken")):
            run = self.job(argv, pythonpath=[fixture(fake)])
            without = self.job(argv, probe=False, pythonpath=[fixture(fake)])
            self.assertEqual(run.rc, 3, run.err)
            self.assertEqual((run.out, run.err), (without.out, without.err))
            self.assertEqual([e["event"] for e in run.events], ["probe_error"], run.events)
            self.assertEqual(run.events[0]["where"], where)
            self.assertIn(says, run.events[0]["error"])
            self.assertEqual(run.events[0]["pid"], run.pid)

    # --- 8: descriptors -----------------------------------------------------------------

    @staticmethod
    def pipe_fds(listing, ino):
        return {int(fd): d for fd, d in listing["fds"].items() if d["target"] == "pipe:[%d]" % ino}

    def test_08_no_descriptor_leak(self):
        """The first process: fd n is the only descriptor the probe adds (it opens none), made
        non-blocking. A Popen worker: the one descriptor the probe opens is close-on-exec."""
        argv = [PY, fixture("fd_check.py")]
        with_probe = self.job(argv)
        bare = self.job(argv, probe=False, channel=False)
        self.assertRan(with_probe)
        self.assertRan(bare)
        self.assertEqual(len(with_probe.of("step")), 1, with_probe.events)
        listing = json.loads(with_probe.out)
        fds = {int(fd) for fd in listing["fds"]}
        self.assertEqual(fds, {int(fd) for fd in json.loads(bare.out)["fds"]} | {5})
        ours = self.pipe_fds(listing, with_probe.ino)
        self.assertEqual(list(ours), [5])
        self.assertTrue(ours[5]["nonblock"])

        worker_run = self.job([PY, fixture("popen_parent.py")])
        self.assertRan(worker_run)
        worker = json.loads(worker_run.out)
        self.assertEqual(len(worker_run.steps(worker["pid"])), 2)
        ours = self.pipe_fds(worker, worker_run.ino)
        self.assertEqual(len(ours), 1, worker)
        (d,) = ours.values()
        self.assertTrue(d["cloexec"], worker)
        self.assertTrue(d["nonblock"], worker)

    # --- 9: start-up cost -----------------------------------------------------------------

    def imported(self, **kw):
        run = self.job([PY, "-X", "importtime", "-c", "pass"], **kw)
        self.assertRan(run)
        names = set()
        for line in run.err.decode().splitlines():
            m = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", line)
            if m:
                names.add(m.group(1))
        return names

    def best(self, argv, n, **kw):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            self.assertRan(self.job(argv, **kw))
            times.append(time.perf_counter() - start)
        return min(times)

    def test_09_import_cost(self):
        """The probe imports nothing `python -c pass` does not; start-up times printed."""
        with_probe, without = self.imported(), self.imported(probe=False)
        self.assertIn("site", without)
        self.assertEqual(with_probe, without)
        show = [PY, "-c", "import sys; print(sorted(sys.modules))"]
        self.assertEqual(self.job(show).out, self.job(show, probe=False).out)
        rows = []
        for argv, n in (([PY, "-c", "pass"], 10), ([PY, fixture("inside_argparse.py")], 10),
                        ([PY, "-c", "import torch"], 2)):
            a = self.best(argv, n, probe=False)
            b = self.best(argv, n)
            rows.append("  %-28s best of %2d: %7.1f ms without, %7.1f ms with the probe (%+.1f ms)"
                        % (" ".join(os.path.basename(w) for w in argv[1:]), n, a * 1e3,
                           b * 1e3, (b - a) * 1e3))
        sys.stderr.write("\nstart-up cost (%s):\n%s\n" % (PY, "\n".join(rows)))

    # --- beyond the list: the channel's edges ---------------------------------------------

    def test_10_not_our_descriptor(self):
        """fd n open but not oomguard's pipe (another inode), or no channel at all: the probe
        is quiet and writes nowhere; the job's output is unchanged."""
        path = os.path.join(self.mkdtemp(), "job-file")
        n = free_fd()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.dup2(fd, n)
        os.close(fd)
        try:
            env = {"OOMGUARD_PROBE_FD": str(n), "OOMGUARD_PROBE_PIPE": "12345",
                   "PYTHONPATH": self.probe_dir}
            argv = [PY, fixture("popen_parent.py")]
            e = dict(os.environ, **env)
            proc = subprocess.run(argv, env=e, pass_fds=(n,), capture_output=True, timeout=120)
        finally:
            os.close(n)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stderr, b"")
        self.assertEqual(os.path.getsize(path), 0)
        # The probe on the path, no channel: nothing breaks, nothing printed.
        run = self.job([PY, fixture("print_text.py")], channel=False)
        without = self.job([PY, fixture("print_text.py")], probe=False, channel=False)
        self.assertEqual((run.rc, run.out, run.err), (without.rc, without.out, without.err))

    def test_11_full_pipe_and_reader_gone(self):
        """A full pipe drops events and never blocks the job; a pipe with no reader (oomguard
        gone) never kills it, even where the job set SIGPIPE back to its default."""
        argv = [PY, fixture("torch_loop.py"), "--steps", "6"]
        run = self.job(argv, fill=True, timeout=60)
        self.assertRan(run)
        self.assertEqual(run.out.count(b"loss"), 6)
        for extra in ([], ["--sigpipe-default"]):
            run = self.job(argv + extra, reader=False, timeout=60)
            self.assertRan(run)
            self.assertEqual(run.err, b"")
            self.assertEqual(run.out.count(b"loss"), 6)

    def test_12_torchrun(self):
        """torchrun, 2 ranks (gloo on the CPU), each with a DataLoader worker started with
        spawn: every process that imports torch says hooked (the agent, the ranks, the loader
        workers, all through /proc of an ancestor but the agent), each rank counts its own 3
        steps under its RANK."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        run = self.job([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(port),
                        fixture("ddp_job.py"), "--steps", "3", "--workers", "1"], timeout=180)
        self.assertRan(run)
        ranks = {}
        for e in run.of("step"):
            ranks.setdefault(e["rank"], set()).add(e["pid"])
        self.assertEqual(sorted(ranks), [0, 1], run.events)
        for rank, pids in ranks.items():
            self.assertEqual(len(pids), 1, run.events)
            self.assertStepEvents(run, pids.pop(), 3)
        hooked = run.of("hooked")
        self.assertEqual(len(hooked), 5, hooked)  # agent, 2 ranks, 2 loader workers
        self.assertEqual(len({e["pid"] for e in hooked}), 5, hooked)
        self.assertIn(run.pid, {e["pid"] for e in hooked})

    def test_13_python_versions(self):
        """Every Python found here, with a stand-in torch (standard library only): 3.6 and
        later report, Python 2 stays quiet; output, exit status and the interpreter's own
        sitecustomize (Debian's /usr/lib/python3.x/sitecustomize.py) as without the probe."""
        code = ("import sys, torch\n"
                "opt = torch.optim.Optimizer()\n"
                "for _ in range(5): opt.step()\n"
                "print(sys.path[1:])\n"
                "try:\n"
                "    import sitecustomize; print(sitecustomize.__file__)\n"
                "except ImportError: print('no sitecustomize')\n"
                "sys.exit(4)\n")
        seen = 0
        for exe, version in interpreters():
            with self.subTest(python=exe, version=version):
                argv = [exe, "-c", code]
                path = [fixture("mini_torch")]
                run = self.job(argv, pythonpath=path)
                without = self.job(argv, probe=False, pythonpath=path)
                self.assertEqual((run.rc, run.out, run.err), (4, without.out, without.err))
                if version >= (3, 6):
                    self.assertStepEvents(run, run.pid, 5)
                else:
                    self.assertEqual(run.events, [])
                seen += 1
        sys.stderr.write("(%d interpreters) " % seen)

    def test_14_import_system_transparent(self):
        """importlib.util.find_spec, the module's spec and loader, inspect.getsource and
        sys.meta_path after `import torch`: as without the probe."""
        code = ("import importlib.util as u, inspect, sys\n"
                "s = u.find_spec('torch'); print(s.name, type(s.loader).__name__, s.origin)\n"
                "import torch\n"
                "opt = sys.modules['torch.optim.optimizer']\n"
                "o = u.find_spec('torch.optim.optimizer')\n"
                "print(o.name, type(o.loader).__name__, o.origin)\n"
                "for m in (torch, opt):\n"
                "    print(type(m.__loader__).__name__, m.__spec__.loader is m.__loader__,\n"
                "          sorted(vars(m.__loader__)))\n"
                "print(len(inspect.getsource(opt.Optimizer.step)) > 0)\n"
                "print([type(f).__name__ for f in sys.meta_path\n"
                "       if not getattr(f, '_oomguard_probe', False)])\n"
                "print([type(f).__name__ for f in sys.meta_path][:1])\n")
        run = self.job([PY, "-c", code])
        without = self.job([PY, "-c", code], probe=False)
        self.assertRan(run)
        # The probe's finder stays first while a watched module (a framework's) is still to
        # come; the rest of sys.meta_path as without the probe.
        self.assertEqual(run.out.splitlines()[:-1], without.out.splitlines()[:-1])
        self.assertEqual(run.out.splitlines()[-1], b"['_OomguardProbeFinder']")
        self.assertEqual(len(run.of("hooked")), 1, run.events)
        # Once every watched module has loaded, the finder is gone.
        if importlib.util.find_spec("pytorch_lightning") is not None:
            code = ("import sys, argparse, torch, transformers.training_args, lightning.pytorch\n"
                    "import pytorch_lightning\n"
                    "print([f for f in sys.meta_path if hasattr(f, '_oomguard_probe')])\n")
            run = self.job([PY, "-c", code], timeout=180)
            self.assertRan(run)
            self.assertEqual(run.out, b"[]\n")

    def test_15_cuda_paths(self):
        """The CUDA paths against the stand-in torch (no GPU here): no CUDA figures before the
        job initializes CUDA, the allocator's figures in every step after, the observer
        attached at that initialization and its "oom" event with the largest free block of the
        device's default pool; the job's own handling of the error and its exit unchanged.
        Where the job records the allocator's history, no snapshot is taken."""
        argv = [PY, fixture("mini_cuda_job.py")]
        path = [fixture("mini_torch")]
        for history in ("0", "1"):
            env = {"MINI_TORCH_CUDA": "1", "MINI_TORCH_HISTORY": history}
            run = self.job(argv, pythonpath=path, env=env)
            without = self.job(argv, probe=False, pythonpath=path, env=env)
            self.assertEqual((run.rc, run.out, run.err), (5, without.out, without.err))
            self.assertIn(b"caught: CUDA out of memory (fake)", run.out)
            self.assertEqual([e["event"] for e in run.events],
                             ["hooked", "step", "step", "step", "oom", "step"], run.events)
            self.assertIs(run.events[0]["cuda"], True)
            steps = run.of("step")
            self.assertEqual([e["step"] for e in steps], [1, 2, 3, 4])
            self.assertNotIn("cuda_allocated_bytes", steps[0])
            mib = 1 << 20
            self.assertEqual(
                [(e["cuda_allocated_bytes"], e["cuda_peak_allocated_bytes"],
                  e["cuda_reserved_bytes"], e["cuda_peak_reserved_bytes"],
                  e["cuda_alloc_retries"]) for e in steps[1:]],
                [(3 * mib, 3 * mib, 4 * mib, 4 * mib, 0), (6 * mib, 6 * mib, 6 * mib, 6 * mib, 0),
                 (9 * mib, 9 * mib, 10 * mib, 10 * mib, 1)])
            (oom,) = run.of("oom")
            want = {"device": 0, "requested_bytes": 5 << 30, "device_total_bytes": 80 << 30,
                    "device_free_bytes": 1 << 30, "cuda_reserved_bytes": 10 * mib,
                    "cuda_allocated_bytes": 9 * mib}
            if history == "0":
                want["largest_free_block_bytes"] = 5 * mib
            self.assertEqual({k: v for k, v in oom.items() if k not in ("event", "pid", "rank", "t")},
                             want)
        # A CUDA build the job never initializes: no observer, no CUDA figures, no error.
        code = "import torch\nopt = torch.optim.Optimizer()\nfor _ in range(2): opt.step()\n"
        run = self.job([PY, "-c", code], pythonpath=path, env={"MINI_TORCH_CUDA": "1"})
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 2)

    def test_16_torch_compile(self):
        """The optimizer step compiled with torch.compile: every step still counted, torch's
        own messages the same (but for their time and pid)."""
        argv = [PY, fixture("compiled_step.py"), "eager"]
        run = self.job(argv)
        without = self.job(argv, probe=False)
        self.assertRan(run)
        self.assertStepEvents(run, run.pid, 5)
        glog = re.compile(rb"^([IWE])\d{4} [\d:.]+ +\d+ ", re.M)
        self.assertEqual(glog.sub(rb"\1 ", run.err), glog.sub(rb"\1 ", without.err))
        self.assertEqual(run.out, without.out)


    # --- 17-23: where the job keeps its batch, and setting it ---------------------------

    OPTIONS = [
        {"strings": "--batch_size --bs", "dest": "batch_size", "type": "int", "default": 64},
        {"strings": "--gradient_accumulation_steps", "dest": "gradient_accumulation_steps",
         "type": "int", "default": 1},
        {"strings": "--auto-find-batch-size", "dest": "auto_find_batch_size", "type": "",
         "default": False},
    ]

    def options(self, run, argv0, *values):
        return [dict(o, parser=1, argv0=argv0, value=v) for o, v in zip(self.OPTIONS, values)]

    def test_17_options_argparse(self):
        """A plain argparse script that never imports torch: an "option" event for each option
        naming a batch or an accumulation (a flag too, with no type), none for --lr; the value
        from the command line; nothing for a list the script parses itself; a subcommand's
        option; parse_intermixed_args. Output byte-identical with and without the probe."""
        script = fixture("inside_argparse.py")
        for extra, values in (([], (64, 1, False)), (["--bs", "8", "--auto-find-batch-size"],
                                                      (8, 1, True))):
            argv = [PY, script] + extra
            run = self.job(argv)
            without = self.job(argv, probe=False)
            self.assertRan(run)
            self.assertEqual((run.out, run.err), (without.out, without.err))
            self.assertTrue(run.out.endswith(b" False\n"), run.out)  # no torch
            self.assertEqual([e["event"] for e in run.events], ["option"] * 3, run.events)
            self.assertEqual([payload(e) for e in run.events], self.options(run, script, *values))
            self.assertEqual({e["pid"] for e in run.events}, {run.pid})
        # Many parsers, each parsed twice: each reported once, 4 parsers, 16 options each.
        run = self.job([PY, script], env={"INSIDE_PARSE": "many"})
        self.assertRan(run)
        self.assertEqual([e["parser"] for e in run.events],
                         [1] * 3 + [2] * 16 + [3] * 16 + [4] * 16)
        self.assertEqual([e["dest"] for e in run.events[3:19]], ["batch%d" % i for i in range(16)])
        # A command line argparse refuses: its message and exit status, nothing sent.
        argv = [PY, script, "--bs", "many"]
        run = self.job(argv)
        without = self.job(argv, probe=False)
        self.assertEqual((run.rc, run.out, run.err), (2, without.out, without.err))
        self.assertIn(b"invalid int value: 'many'", run.err)
        self.assertEqual(run.events, [])
        # A list of the script's own (the same options): not the command line, nothing sent.
        run = self.job([PY, script, "--bs", "3"], env={"INSIDE_PARSE": "explicit"})
        self.assertRan(run)
        self.assertIn(b"('batch_size', 8)", run.out)
        self.assertEqual(run.events, [])
        # The subcommand chosen: its options after the parser's own, under the same parser.
        argv = [PY, script, "--bs", "3", "train", "--micro-batch", "7"]
        run = self.job(argv, env={"INSIDE_PARSE": "sub"})
        self.assertRan(run)
        self.assertEqual([payload(e) for e in run.events],
                         self.options(run, script, 3, 1, False) +
                         [{"parser": 1, "argv0": script, "strings": "--micro-batch",
                           "dest": "micro_batch", "type": "int", "default": 4, "value": 7}])
        # argparse imported before site ran (here: -S, then site.main() by hand; a .pth file
        # in site-packages does the same): hooked at start.
        code = ("import argparse, site\n"
                "site.main()\n"
                "p = argparse.ArgumentParser()\n"
                "p.add_argument('--batch_size', type=int, default=3)\n"
                "print(p.parse_args())\n")
        run = self.job([PY, "-S", "-c", code])
        self.assertRan(run)
        self.assertEqual([payload(e) for e in run.events],
                         [{"parser": 1, "argv0": "-c", "strings": "--batch_size",
                           "dest": "batch_size", "type": "int", "default": 3, "value": 3}])
        # Every Python here from 3.6 (parse_intermixed_args from 3.7); Python 2 stays quiet.
        seen = 0
        for exe, version in interpreters():
            with self.subTest(python=exe, version=version):
                modes = ["", "intermixed"] if version >= (3, 7) else [""]
                for mode in modes:
                    argv = [exe, script, "--bs", "5"]
                    run = self.job(argv, env={"INSIDE_PARSE": mode})
                    without = self.job(argv, probe=False, env={"INSIDE_PARSE": mode})
                    self.assertEqual((run.rc, run.out, run.err), (0, without.out, without.err))
                    if version >= (3, 6):
                        self.assertEqual([payload(e) for e in run.events],
                                         self.options(run, script, 5, 1, False), mode)
                    else:
                        self.assertEqual(run.events, [])
                seen += 1
        sys.stderr.write("(%d interpreters) " % seen)

    def test_18_hf_argument_parser(self):
        """HfArgumentParser(TrainingArguments) on the command line: "option" events for its
        batch and accumulation options (it parses sys.argv[1:] as a list), and the "framework"
        event of the TrainingArguments it builds; with OOMGUARD_PROBE_SET, the arguments the job
        gets carry the batch and accumulation asked for, the options still say the command
        line's."""
        out = self.mkdtemp()
        script = fixture("inside_hf.py")
        argv = [PY, script, "--output_dir", out, "--per_device_train_batch_size", "4",
                "--gradient_accumulation_steps", "3"]
        where = "%s:%d" % (script, line_of(script, "parse_args_into_dataclasses()"))
        for asked, printed, framework in (
                (None, b"TrainingArguments 4 3\n",
                 {"batch": 4, "accum": 3, "set": False}),
                ("transformers 16 2", b"TrainingArguments 16 2\n",
                 {"batch": 16, "accum": 2, "set": True, "from_batch": 4, "from_accum": 3})):
            env = {"INSIDE_HF": "parser"}
            if asked:
                env["OOMGUARD_PROBE_SET"] = asked
            run = self.job(argv, env=env, timeout=180)
            self.assertRan(run)
            self.assertEqual(run.out, printed)
            options = {e["dest"]: e for e in run.of("option")}
            self.assertEqual(payload(options["per_device_train_batch_size"]),
                             {"parser": 1, "argv0": script, "dest": "per_device_train_batch_size",
                              "strings": "--per_device_train_batch_size "
                                         "--per-device-train-batch-size",
                              "type": "int", "default": 8, "value": 4})
            self.assertEqual(payload(options["gradient_accumulation_steps"]),
                             {"parser": 1, "argv0": script, "dest": "gradient_accumulation_steps",
                              "strings": "--gradient_accumulation_steps "
                                         "--gradient-accumulation-steps",
                              "type": "int", "default": 1, "value": 3})
            self.assertLessEqual(len(run.of("option")), 16)
            self.assertEqual({e["parser"] for e in run.of("option")}, {1})
            (fw,) = run.of("framework")
            self.assertEqual(payload(fw), dict(framework, row="transformers", where=where,
                                               **HF_FIELDS, **{"class": "TrainingArguments"}))

    def test_19_hf_set(self):
        """TrainingArguments built in code: without OOMGUARD_PROBE_SET unchanged (and the
        output as without the probe); with "transformers 16 2", 16 and 2 before the framework
        validates them, and a real Trainer on the CPU trains with them (micro-batches of 16, 2
        steps of 2); TRL's SFTConfig (which calls super().__post_init__()) the same."""
        script = fixture("inside_hf.py")
        out = self.mkdtemp()
        argv = [PY, script, out]
        env = {"INSIDE_HF": "code"}
        run = self.job(argv, env=env, timeout=180)
        without = self.job(argv, env=env, probe=False, timeout=180)
        self.assertRan(run)
        self.assertEqual(run.out, b"TrainingArguments 32 1\n")
        self.assertEqual(run.out, without.out)
        (fw,) = run.of("framework")
        where = "%s:%d" % (script, line_of(script, "args = TrainingArguments("))
        self.assertEqual(payload(fw), dict(HF_FIELDS, row="transformers", batch=32, accum=1,
                                           where=where, set=False,
                                           **{"class": "TrainingArguments"}))

        env = {"INSIDE_HF": "train", "OOMGUARD_PROBE_SET": "transformers 16 2"}
        run = self.job(argv, env=env, timeout=240)
        self.assertRan(run)
        lines = run.out.decode().splitlines()
        self.assertEqual(lines[0], "TrainingArguments 16 2")
        self.assertEqual([l for l in lines if l.startswith("micro-batch")], ["micro-batch 16"] * 4)
        self.assertIn("trainer done", lines)
        self.assertEqual(run.steps(), [1, 2])
        (fw,) = run.of("framework")
        self.assertEqual(payload(fw), dict(HF_FIELDS, row="transformers", batch=16, accum=2,
                                           where=where, set=True, from_batch=32, from_accum=1,
                                           **{"class": "TrainingArguments"}))
        # The Trainer's own loader, made inside transformers: where is the job's train() call.
        loaders = run.of("loader")
        self.assertEqual([e["batch"] for e in loaders], [16], run.events)
        self.assertEqual(loaders[0]["where"], "%s:%d" % (script, line_of(script, ".train()")))

        if not importable("trl"):
            sys.stderr.write("(no trl) ")
            return
        env = {"INSIDE_HF": "sft", "OOMGUARD_PROBE_SET": "transformers 16 2"}
        run = self.job(argv, env=env, timeout=240)
        self.assertRan(run)
        self.assertEqual(run.out, b"SFTConfig 16 2\n")
        (fw,) = run.of("framework")
        where = "%s:%d" % (script, line_of(script, "SFTConfig("))
        self.assertEqual(payload(fw), dict(HF_FIELDS, row="transformers", batch=16, accum=2,
                                           where=where, set=True, from_batch=32, from_accum=1,
                                           **{"class": "SFTConfig"}))

    def test_20_lightning_set(self):
        """Lightning's Trainer(accumulate_grad_batches=1) and a DataModule whose batch is 64
        (self.batch_size, or save_hyperparameters): the "framework" event at fit says them;
        with OOMGUARD_PROBE_SET="lightning 32 2" the trainer accumulates 2 and train_dataloader
        sees 32 (4 micro-batches of 32 for 2 steps); pytorch_lightning the same; LightningCLI's
        Trainer too."""
        script = fixture("inside_lightning.py")
        where = "%s:%d" % (script, line_of(script, "trainer.fit("))
        runs = [("lightning", "attr", None), ("lightning", "attr", "lightning 32 2"),
                ("lightning", "hparams", "lightning 32 2")]
        if importable("pytorch_lightning"):
            runs.append(("pytorch_lightning", "attr", "lightning 32 2"))
        else:
            sys.stderr.write("(no pytorch_lightning) ")
        for package, holder, asked in runs:
            with self.subTest(package=package, holder=holder, asked=asked):
                env = {"OOMGUARD_PROBE_SET": asked} if asked else {}
                run = self.job([PY, script, package, self.mkdtemp(), holder], env=env,
                               timeout=180)
                self.assertRan(run)
                lines = run.out.decode().splitlines()
                batch, accum = (32, 2) if asked else (64, 1)
                self.assertEqual(lines[0], "accumulate_grad_batches %d" % accum)
                self.assertEqual(lines[1], "train_dataloader batch %d" % batch)
                self.assertEqual(lines[2:], ["micro-batch %d" % batch] * (2 * accum) + ["steps 2"])
                self.assertEqual(run.steps(), [1, 2])
                (fw,) = run.of("framework")
                want = dict(LIGHTNING_FIELDS, row="lightning", batch=batch, accum=accum,
                            where=where, set=bool(asked), **{"class": "Trainer"})
                if asked:
                    want.update(from_batch=64, from_accum=1)
                self.assertEqual(payload(fw), want)
                self.assertEqual([payload(e) for e in run.of("loader")],
                                 [{"batch": batch, "where": "%s:%d" % (
                                     script, line_of(script, "return DataLoader("))}])
        # LightningCLI builds the Trainer from its command line: the set wins over it.
        root = self.mkdtemp()
        run = self.job(lightning_cli(root), env={"OOMGUARD_PROBE_SET": "lightning 2 1"}, timeout=180)
        self.assertRan(run)
        self.assertEqual(run.out.count(b"batch 2 holds"), 2, run.out)
        self.assertEqual(run.steps(), [1, 2])
        (fw,) = run.of("framework")
        self.assertEqual((fw["batch"], fw["accum"], fw["from_batch"], fw["from_accum"]),
                         (2, 1, 1, 2))

    def test_21_loader(self):
        """A DataLoader(ds, batch_size=64) in a plain loop: one "loader" event naming the
        fixture's line (its whole path, or relative to the job's working directory where it is
        there); none for a loader with a batch sampler; the output as without the probe."""
        script = fixture("inside_loader.py")
        run = self.job([PY, script])
        without = self.job([PY, script], probe=False)
        self.assertRan(run)
        self.assertEqual((run.out, run.err), (without.out, without.err))
        where = "%s:%d" % (script, line_of(script, "# the loader"))
        self.assertEqual([payload(e) for e in run.of("loader")], [{"batch": 64, "where": where}])
        # A script in the job's working directory: named as its command names it.
        run = self.job([PY, script], cwd=FIXTURES)
        self.assertRan(run)
        where = "inside_loader.py:%d" % line_of(script, "# the loader")
        self.assertEqual([payload(e) for e in run.of("loader")], [{"batch": 64, "where": where}])
        self.assertEqual(run.of("probe_error"), [])

    def test_22_probe_fails_in_a_hook(self):
        """A failure of the probe's own in a hook (a DataLoader whose batch_size raises when
        read): one probe_error, then nothing from that process (the next loader says nothing);
        the job's output as without the probe."""
        argv = [PY, fixture("inside_loader.py")]
        env = {"INSIDE_ODD": "1"}
        run = self.job(argv, env=env)
        without = self.job(argv, env=env, probe=False)
        self.assertRan(run)
        self.assertEqual((run.out, run.err), (without.out, without.err))
        self.assertIn(b"8 odd batches\n16 batches\n", run.out)
        self.assertEqual([e["event"] for e in run.events], ["hooked", "loader", "probe_error"])
        self.assertEqual(payload(run.events[-1]), {"where": "loader",
                                                   "error": "RuntimeError: this loader hides "
                                                            "its batch"})

    def test_23_bad_set(self):
        """OOMGUARD_PROBE_SET that is not ROW BATCH ACCUM (a word for a number, empty, four
        words, numbers too large, zero, another row): nothing set, nothing more said, the job
        as without the probe."""
        script = fixture("inside_hf.py")
        argv = [PY, script, self.mkdtemp()]
        without = self.job(argv, env={"INSIDE_HF": "code"}, probe=False, timeout=180)
        self.assertEqual(without.out, b"TrainingArguments 32 1\n")
        for asked in ("transformers x 2", "", "a b c d", "transformers 16 2 1",
                      "transformers 99999999999999999999 2", "transformers 16 4294967296",
                      "transformers 0 2", "lightning 16 2", "transformers ١٦ 2"):
            with self.subTest(asked=asked):
                run = self.job(argv, env={"INSIDE_HF": "code", "OOMGUARD_PROBE_SET": asked},
                               timeout=180)
                self.assertEqual((run.rc, run.out, run.err), (0, without.out, without.err))
                self.assertEqual([e["event"] for e in run.events], ["hooked", "framework"])
                self.assertEqual(payload(run.of("framework")[0])["set"], False)


def interpreters():
    """(executable, version) of each distinct Python found: on PATH by name, pyenv's, and
    /usr/bin's."""
    names = ["python2.7"] + ["python3.%d" % m for m in range(6, 15)] + ["python3"]
    found = [shutil.which(n) for n in names]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin/python")))
    found += ["/usr/bin/python3", PY]
    seen = set()
    for exe in found:
        if not exe or not os.path.exists(exe):
            continue
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d %d' % sys.version_info[:2]);"
                                  "print(sys.executable)"], capture_output=True, timeout=30,
                                 env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = out.stdout.decode().split()
        if out.returncode != 0 or len(lines) != 3:
            continue
        key = os.path.realpath(lines[2])
        if key in seen:
            continue
        seen.add(key)
        yield lines[2], (int(lines[0]), int(lines[1]))


if __name__ == "__main__":
    unittest.main()
