# oomguard's probe. oomguard writes this file into a private directory that it puts first on
# PYTHONPATH, so that every Python process of the job imports it at start-up (site.py imports
# `sitecustomize`). It reports the job's optimizer steps and memory, and where the job keeps its
# batch, as JSON lines on a pipe that oomguard reads, and changes nothing else unless a relaunch
# asks it to set the batch (OOMGUARD_PROBE_SET):
#
# * at start it imports nothing (only `os` and `sys`, which are loaded before site runs), takes
#   its own directory off sys.path (PYTHONPATH in the environment stays as given, so children
#   load the probe too), puts one finder first on sys.meta_path, and runs the user's own
#   `sitecustomize` further down sys.path exactly as site.py would have;
# * the finder watches a few names only (_WATCH: torch's optimizer, argparse, torch's
#   DataLoader, each framework's module of _FRAMEWORKS), delegates them to the finders after it
#   and, when the job itself imports one, calls back once it has run. At torch: the probe finds
#   oomguard's pipe, registers the global optimizer-step post-hook, sends "hooked" and queues
#   PyTorch's CUDA out-of-memory observer for when the job initializes CUDA. At argparse: the
#   parse of the command line says the options that name a batch, an accumulation or workers
#   ("option"). At a framework: its arguments object says the batch and accumulation it got, and
#   is given those OOMGUARD_PROBE_SET asks for ("framework"). At DataLoader: each loader's batch
#   ("loader"). Each name is watched until it has loaded; the finder leaves sys.meta_path once
#   none is left;
# * every failure of its own is reported once as "probe_error" and the probe goes quiet in that
#   process; it never raises into the job, never prints, never blocks, never starts a thread.
#
# The channel: OOMGUARD_PROBE_FD=n is the write end of oomguard's pipe in the job's first
# process, OOMGUARD_PROBE_PIPE its inode. Where fd n is not that pipe (subprocess.Popen closes
# descriptors), the probe walks up the parent chain and opens /proc/<ancestor>/fd/<n>. Each event
# is one line of < 4096 bytes written with one os.write on a non-blocking descriptor (atomic on a
# pipe); an event that cannot be written at once is dropped.

import os
import sys

# The frameworks whose arguments object holds the job's batch, one row each: (row: the name
# OOMGUARD_PROBE_SET and the "framework" event use, module, class, how it is reached, batch,
# accumulation: the fields' names, which the event names too). How: "fields": both are fields of the class (a dataclass), set at the start of
# its __post_init__, before the framework validates them; "trainer": the accumulation is an
# argument of the class's __init__, the batch a `batch_size` where Lightning's BatchSizeFinder
# looks for it (the LightningModule, the DataModule or their hparams), read and set at fit.
_FRAMEWORKS = (
    ("transformers", "transformers.training_args", "TrainingArguments", "fields",
     "per_device_train_batch_size", "gradient_accumulation_steps"),
    ("lightning", "lightning.pytorch.trainer.trainer", "Trainer", "trainer", "batch_size",
     "accumulate_grad_batches"),
    ("lightning", "pytorch_lightning.trainer.trainer", "Trainer", "trainer", "batch_size",
     "accumulate_grad_batches"),
)
# The optimizer's module first: where it was imported before site ran, torch was too, and the
# hook goes in before "hooked" is sent for torch.
_WATCH = ("torch.optim.optimizer", "torch", "argparse", "torch.utils.data.dataloader") + tuple(
    row[1] for row in _FRAMEWORKS
)
_MAX_LINE = 4096

_fd_n = -1  # OOMGUARD_PROBE_FD
_ino = -1  # OOMGUARD_PROBE_PIPE
_chan = -1  # the descriptor written to; -1: not looked for yet
_chan_owned = False  # _chan was opened by the probe (an ancestor's /proc path)
_chan_lost = False  # the channel went bad once already
_quiet = True  # until _setup finds the environment
_finder = None
_watch = set(_WATCH)  # the names not loaded yet: the finder leaves when none is left
_compiled = []  # the parts of the probe compiled so far (_late)
_hook = None  # the RemovableHandle of the step hook
_done = False  # "hooked" sent and the observer queued
_time = None  # time.time, bound once torch is imported
_mono = None  # time.monotonic
_steps = 0  # optimizer steps done in this process
_sent_step = 0  # the last step count sent
_last_sent = 0.0  # monotonic time of the last step event


# --- the import hook ----------------------------------------------------------------------


class _OomguardProbeFinder:
    """First on sys.meta_path: for a name it still watches it asks the finders after it for the
    spec and has its loader call back once the module has run; every other name it leaves to
    them at once."""

    _oomguard_probe = True

    def find_spec(self, name, path=None, target=None):
        if name not in _watch or _quiet:
            return None
        try:
            meta = sys.meta_path
            try:
                rest = meta[meta.index(self) + 1 :]
            except ValueError:
                rest = [f for f in meta if f is not self]
            for finder in rest:
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    _wrap_loader(spec, name)
                    return spec
        except Exception as e:
            # Python asks the same finders again after us: their own errors stay theirs.
            _error("find_spec", e)
        return None


def _wrap_loader(spec, name):
    # An attribute of this loader instance only (file loaders are made per module), taken off
    # again before the module runs: the spec and the module's __loader__ stay the real ones.
    loader = spec.loader
    if loader is None or isinstance(loader, type):
        return
    d = getattr(loader, "__dict__", None)
    run = getattr(loader, "exec_module", None)
    if d is None or run is None:
        return
    had = "exec_module" in d
    prev = d.get("exec_module")

    def exec_module(module):
        try:
            if had:
                loader.exec_module = prev
            else:
                del loader.exec_module
        except Exception:
            pass
        run(module)
        if getattr(module, "__name__", None) == name:
            _loaded(name, module)

    loader.exec_module = exec_module


def _unfind():
    global _finder
    f, _finder = _finder, None
    if f is not None:
        try:
            sys.meta_path.remove(f)
        except ValueError:
            pass


def _late(*parts):
    """Compile the parts of the rest of the probe named (_LATE, below; "common" where none is
    named) into this namespace, each once, each at its own lines of this file: a traceback of
    the job's own exception through a wrapper of the probe shows the right source line."""
    line, text = _LATE
    for part in parts or ("common",):
        if part not in _compiled:
            start = text.index('\n# ==== part "%s"' % part)
            end = text.find("\n# ==== part ", start + 1)
            code = text[start:] if end < 0 else text[start:end]
            code = "\n" * (line - 1 + text.count("\n", 0, start)) + code
            exec(compile(code, __file__, "exec"), globals())
            _compiled.append(part)


def _error(where, err):
    try:
        _late()
        _fail(where, err)
    except Exception:
        pass


def _loaded(name, module):
    if not _quiet:
        try:
            if name == "argparse":
                # Imported by most Python tools: only the wrapper now, the rest at a parse.
                _late("wrap")
                _on_argparse(module)
            else:
                _late("common", "steps", "wrap", "inside")
                _on_module(name, module)
        except Exception as e:
            _error("hook", e)
    _watch.discard(name)
    if not _watch:
        _unfind()


# --- start --------------------------------------------------------------------------------


def _same_dir(a, b):
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _setup():
    global _fd_n, _ino, _quiet, _finder
    env = os.environ
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    if env.get("OOMGUARD_PROBE_DIR"):
        dirs.append(env["OOMGUARD_PROBE_DIR"])
    # The probe's directory off sys.path: the job sees the sys.path it would have had.
    for entry in list(sys.path):
        if isinstance(entry, str) and entry and any(_same_dir(entry, d) for d in dirs):
            sys.path.remove(entry)
            sys.path_importer_cache.pop(entry, None)
    if sys.version_info < (3, 6):
        return  # no find_spec finders (Python 2): quiet
    try:
        fd_n = int(env.get("OOMGUARD_PROBE_FD", ""))
        ino = int(env.get("OOMGUARD_PROBE_PIPE", ""))
    except ValueError:
        return  # not under oomguard: quiet
    if fd_n < 3 or ino <= 0:
        return
    if any(getattr(f, "_oomguard_probe", False) for f in sys.meta_path):
        return  # another copy of the probe runs in this process already
    _fd_n, _ino, _quiet = fd_n, ino, False
    # Imported before site ran (a .pth file; argparse in some setups): hooked now.
    for name in _WATCH:
        module = sys.modules.get(name)
        if module is not None and not _quiet:
            _loaded(name, module)
    if _watch and not _quiet:
        _finder = _OomguardProbeFinder()
        sys.meta_path.insert(0, _finder)


# --- the rest, compiled when the job imports a watched module -------------------------------
#
# Everything below runs only in a process that imports a watched module, so it is kept as text
# and compiled then, part by part (_late), into this module's namespace: a process that imports
# none of them compiles only the part above (where bytecode is not cached,
# PYTHONDONTWRITEBYTECODE=1 as in many images, the whole file would cost several ms at every
# start of every Python process of the job, ~1 ms per 100 lines). argparse, which most Python
# tools import, compiles only "wrap" at import, "options" at a parse of the command line and
# "common" only where an option names a batch; torch and the frameworks compile the rest.
# _LATE is (the line of this file its text starts on, the text).

_LATE = (lambda: 0).__code__.co_firstlineno, r'''
# ==== part "common": events and the channel ===============================================
# --- events -------------------------------------------------------------------------------


def _json_str(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_value(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return "null"
        return repr(float(v))
    return _json_str(str(v))


def _encode(ev):
    return "{" + ",".join(_json_str(k) + ":" + _json_value(v) for k, v in ev.items()) + "}\n"


def _short(v):
    try:
        return str(v)[:200]
    except Exception:
        return "?"


def _scalar(v):
    """A value as the event carries it: None, a bool, an int, a float as such, else its str()
    (200 characters at most)."""
    if v is None or isinstance(v, (bool, float)):
        return v
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else _short(v)
    return _short(v)


def _rank():
    env = os.environ
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        v = env.get(key)
        if v is not None:
            try:
                return int(v)
            except ValueError:
                pass
    return 0


def _send(kind, fields):
    """Write one event; False where it was dropped. Never raises."""
    if _quiet:
        return False
    try:
        fd = _channel()
        if fd < 0:
            return False
        t = _time
        if t is None:
            import time

            t = time.time
        ev = {"event": kind, "pid": os.getpid(), "rank": _rank(), "t": t()}
        ev.update(fields)
        data = _encode(ev).encode("utf-8", "replace")
        if len(data) >= _MAX_LINE and "error" in ev:
            ev["error"] = str(ev["error"])[:1000]
            data = _encode(ev).encode("utf-8", "replace")
        if len(data) >= _MAX_LINE:
            return False
        return _write(fd, data)
    except Exception:
        return False


def _write(fd, data):
    # Python ignores SIGPIPE, so a reader gone gives EPIPE; where the job set SIGPIPE to its
    # default (or a handler), block it in this thread around the write and take back the one
    # that write raised.
    sig = None
    old = None
    try:
        import _signal as sig  # built in, loaded at start-up

        if sig.getsignal(sig.SIGPIPE) != sig.SIG_IGN:
            old = sig.pthread_sigmask(sig.SIG_BLOCK, {sig.SIGPIPE})
    except Exception:
        old = None
    broken = False
    try:
        os.write(fd, data)
        return True
    except BrokenPipeError:
        broken = True
        _go_quiet()  # oomguard is gone
        return False
    except OSError:
        return False  # EAGAIN: the pipe is full, the event is dropped
    finally:
        if old is not None:
            try:
                if broken and sig.SIGPIPE not in old:
                    sig.sigtimedwait({sig.SIGPIPE}, 0)
            except Exception:
                pass
            try:
                sig.pthread_sigmask(sig.SIG_SETMASK, old)
            except Exception:
                pass


def _fail(where, err):
    """Report a failure of the probe once, then go quiet in this process."""
    if _quiet:
        return
    if isinstance(err, BaseException):
        err = "%s: %s" % (type(err).__name__, err)
    _send("probe_error", {"where": where, "error": str(err)})
    _go_quiet()


def _go_quiet():
    global _quiet, _chan, _hook
    _quiet = True
    try:
        _unfind()
        if _hook is not None:
            h, _hook = _hook, None
            h.remove()
        if _chan_owned and _chan >= 0 and _is_ours(_chan):
            os.close(_chan)
        _chan = -1
    except Exception:
        pass


# --- the channel --------------------------------------------------------------------------


def _is_ours(fd):
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o010000 and st.st_ino == _ino


def _parent_of(pid):
    fd = os.open("/proc/%d/stat" % pid, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(data[data.rindex(b")") + 1 :].split()[1])


def _find_channel():
    """fd n where it is oomguard's pipe, else a new descriptor to it through the nearest
    ancestor that holds it as fd n; -1 where there is none."""
    if _is_ours(_fd_n):
        if os.get_blocking(_fd_n):
            os.set_blocking(_fd_n, False)
        return _fd_n, False
    try:
        pid = os.getppid()
        for _ in range(64):
            if pid < 1:
                break
            path = "/proc/%d/fd/%d" % (pid, _fd_n)
            try:
                st = os.stat(path)
                if (st.st_mode & 0o170000) == 0o010000 and st.st_ino == _ino:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                    if _is_ours(fd):
                        return fd, True
                    os.close(fd)
            except OSError:
                pass
            if pid == 1:
                break
            pid = _parent_of(pid)
    except (OSError, ValueError, IndexError):
        pass
    return -1, False


def _channel():
    global _chan, _chan_owned, _chan_lost
    if _chan >= 0:
        if _is_ours(_chan):
            return _chan
        # Closed or replaced by the job: look again once, then give up.
        _chan = -1
        if _chan_lost:
            _go_quiet()
            return -1
        _chan_lost = True
    _chan, _chan_owned = _find_channel()
    if _chan < 0:
        _go_quiet()
    return _chan


# ==== part "steps": at torch ==============================================================
# --- the hook -----------------------------------------------------------------------------


def _torch_ready(torch):
    spec = getattr(torch, "__spec__", None)
    return torch is not None and not getattr(spec, "_initializing", False)


def _on_optimizer(mod):
    global _hook, _time, _mono
    if _hook is not None or _quiet:
        return
    if _channel() < 0:
        return  # quiet: not under oomguard
    import time

    _time, _mono = time.time, time.monotonic
    register = getattr(mod, "register_optimizer_step_post_hook", None)
    if register is None:
        version = getattr(sys.modules.get("torch.version"), "__version__", "?")
        _fail(
            "register_optimizer_step_post_hook",
            "torch %s: torch.optim.optimizer has no register_optimizer_step_post_hook" % version,
        )
        return
    _hook = register(_on_step)
    torch = sys.modules.get("torch")
    if _torch_ready(torch):
        _on_torch(torch)  # else when `torch` itself has run


def _on_torch(torch):
    global _done
    if _done or _quiet or _hook is None:
        return
    _done = True
    import atexit

    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):  # Python 3.7
        os.register_at_fork(after_in_child=_after_fork)
    C = getattr(torch, "_C", None)
    cuda = bool(getattr(C, "_has_cuda", False))
    _send("hooked", {"torch": str(getattr(torch, "__version__", "?")), "cuda": cuda})
    # The observer can only be attached once the CUDA allocator exists: have torch call it at
    # its lazy CUDA initialization (at once where that happened already). The probe never
    # initializes CUDA itself.
    lazy = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
    if cuda and lazy is not None and hasattr(C, "_cuda_attach_out_of_memory_observer"):
        lazy(_attach_oom)


# --- steps --------------------------------------------------------------------------------


def _on_step(optimizer, args, kwargs):
    global _steps, _sent_step, _last_sent
    if _quiet:
        return
    try:
        _steps += 1
        n = _steps
        now = _mono()
        if n <= 3 or now - _last_sent >= 0.5:
            _last_sent = now
            _sent_step = n
            if not _done:
                _on_torch(sys.modules.get("torch"))
            _send("step", _step_fields(n))
    except Exception as e:
        _fail("step", e)


def _at_exit():
    global _sent_step
    if _quiet or _hook is None:
        return
    try:
        if _steps > _sent_step:
            _sent_step = _steps
            # Marked: its peaks include whatever ran after the last step (a failed step, an
            # evaluation), so they are no completed step's.
            fields = _step_fields(_steps)
            fields["exit"] = True
            _send("step", fields)
    except Exception as e:
        _fail("exit", e)


def _after_fork():
    global _steps, _sent_step, _last_sent
    _steps = _sent_step = 0
    _last_sent = 0.0


def _rss_peak():
    """VmHWM of /proc/self/status; ru_maxrss where /proc cannot be read."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 65536)
        finally:
            os.close(fd)
        i = data.find(b"\nVmHWM:")
        if i >= 0:
            return int(data[i + 7 :].split(None, 1)[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_STEP_STATS = (
    ("cuda_peak_allocated_bytes", "allocated_bytes.all.peak"),
    ("cuda_peak_reserved_bytes", "reserved_bytes.all.peak"),
    ("cuda_reserved_bytes", "reserved_bytes.all.current"),
    ("cuda_allocated_bytes", "allocated_bytes.all.current"),
    ("cuda_alloc_retries", "num_alloc_retries"),
)


def _step_fields(n):
    fields = {"step": n, "rss_peak_bytes": _rss_peak()}
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    # is_initialized() is false in a forked child of a CUDA process: no CUDA call there.
    if cuda is not None and cuda.is_initialized():
        stats = cuda.memory_stats()
        for key, stat in _STEP_STATS:
            if stat in stats:
                fields[key] = stats[stat]
    return fields


# --- CUDA out of memory -------------------------------------------------------------------


def _attach_oom():
    # Runs inside torch.cuda's lazy initialization, where an exception would fail the job's
    # first CUDA call: nothing escapes.
    try:
        torch = sys.modules["torch"]
        backend = getattr(torch.cuda, "get_allocator_backend", None)
        if _quiet or (backend is not None and backend() != "native"):
            return  # cudaMallocAsync has no observer (attaching fails): no "oom" events
        torch._C._cuda_attach_out_of_memory_observer(_on_oom)
    except Exception as e:
        _fail("oom_observer", e)


def _on_oom(device, requested, device_total, device_free):
    # Called by the caching allocator (its lock released) just before it raises
    # OutOfMemoryError; an exception from here would replace that error: nothing escapes.
    if _quiet:
        return
    try:
        torch = sys.modules["torch"]
        ev = {
            "device": int(device),
            "requested_bytes": int(requested),
            "device_total_bytes": int(device_total),
            "device_free_bytes": int(device_free),
        }
        stats = torch.cuda.memory_stats(device)
        if "reserved_bytes.all.current" in stats:
            ev["cuda_reserved_bytes"] = stats["reserved_bytes.all.current"]
        if "allocated_bytes.all.current" in stats:
            ev["cuda_allocated_bytes"] = stats["allocated_bytes.all.current"]
        largest = _largest_free_block(torch, int(device))
        if largest is not None:
            ev["largest_free_block_bytes"] = largest
        _send("oom", ev)
    except Exception as e:
        _fail("oom", e)


def _largest_free_block(torch, device):
    """The largest cached free ("inactive") block of the default pool on this device, from
    torch.cuda.memory_snapshot without its traces; None where the job records the allocator's
    history (the snapshot would then symbolize every recorded stack: seconds)."""
    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    if enabled is not None and enabled():
        return None
    snapshot = torch.cuda.memory_snapshot
    try:
        segments = snapshot(include_traces=False)
    except TypeError:  # before torch 2.10 or so: no include_traces
        segments = snapshot()
    largest = 0
    for seg in segments:
        if seg.get("device") != device:
            continue
        pool = seg.get("segment_pool_id")
        if pool is not None and tuple(pool) != (0, 0):
            continue  # a private pool (CUDA graphs): not free for other allocations
        for block in seg.get("blocks", ()):
            if block.get("state") == "inactive" and block.get("size", 0) > largest:
                largest = block["size"]
    return largest


# ==== part "wrap": at argparse, and with the frameworks ===================================
# --- wrappers -----------------------------------------------------------------------------


def _wrap(cls, name, where, before=None, after=None, data=None):
    """cls.name (a function of cls's own) replaced by a wrapper that calls before(data, args,
    kwargs) -> (args, kwargs, state) first and after(data, args, kwargs, state, result) once the
    original has returned. The job's call, result and exceptions pass unchanged (a failure of
    the original skips `after`); the probe's own are reported (as `where`) and swallowed."""
    orig = cls.__dict__.get(name)
    if not isinstance(orig, type(_wrap)) or getattr(orig, "_oomguard_probe", False):
        return

    def wrapper(*args, **kwargs):
        state = None
        if before is not None and not _quiet:
            try:
                args, kwargs, state = before(data, args, kwargs)
            except Exception as e:
                _error(where, e)
        result = orig(*args, **kwargs)
        if after is not None and not _quiet:
            try:
                after(data, args, kwargs, state, result)
            except Exception as e:
                _error(where, e)
        return result

    # As functools.wraps (not imported at start): the name, the doc, and __wrapped__, which
    # inspect.signature follows (Lightning and jsonargparse read the signatures of __init__).
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, attr, getattr(orig, attr))
        except AttributeError:
            pass
    wrapper.__dict__.update(orig.__dict__)
    wrapper.__wrapped__ = orig
    wrapper._oomguard_probe = True
    setattr(cls, name, wrapper)


def _on_argparse(mod):
    # In the class, so that subclasses calling super() and parse_args are covered too (in
    # Python 3.13 parse_known_intermixed_args no longer goes through parse_known_args). The
    # wrapper is all that runs at import: the rest is compiled at the first parse.
    cls = mod.ArgumentParser
    for name in ("parse_known_args", "parse_known_intermixed_args"):
        _wrap(cls, name, "option", after=_after_parse)


def _after_parse(data, args, kwargs, state, result):
    # The command line only: args None, or sys.argv[1:] as a list (HfArgumentParser passes it
    # so). A list of the job's own (a test, a config, a library's) says nothing of how the job
    # was started, and costs nothing here.
    given = args[1] if len(args) > 1 else kwargs.get("args")
    argv = getattr(sys, "argv", None) or [""]
    if given is None or (isinstance(given, (list, tuple)) and list(given) == argv[1:]):
        _late("options")
        _on_parse(args[0], argv, result)


# ==== part "options": at the first parse of the command line ==============================
# --- options: argparse ---------------------------------------------------------------------
#
# What the job's command line says of its batch: the options whose name holds one of _KEYS
# (--batch_size, --per_device_train_batch_size, --gradient_accumulation_steps, --num_workers),
# with their default and the value parsed, so that oomguard sees which option to change and
# what it was. Read after the parse returned, from the parser and its namespace only.

_KEYS = ("batch", "accum", "worker")
_parsers = []  # the parsers reported, held so that each is reported once (4 at most)


def _on_parse(parser, argv, result):
    # Compiled without the common part: that only where there is something to send.
    if len(_parsers) >= 4 or any(p is parser for p in _parsers):
        return
    ns = result[0] if isinstance(result, tuple) and result else result
    found = []
    _options(parser, ns, argv[1:], found, 0)
    if not found:
        return
    _late()
    _parsers.append(parser)
    n = len(_parsers)
    for action in found[:16]:
        t = action.type
        _send(
            "option",
            {
                "parser": n,
                "argv0": _short(argv[0]),
                "strings": _short(" ".join(action.option_strings)),
                "dest": _short(action.dest),
                "type": "" if t is None else _short(t if isinstance(t, str) else _name(t)),
                "default": _scalar(action.default),
                "value": _scalar(getattr(ns, str(action.dest), None)),
            },
        )


def _options(parser, ns, argv, found, depth):
    """The options of parser that name a batch, an accumulation or workers, into found; those
    of the subcommand chosen, where it can be told (its dest in the namespace, else the first
    word of the command line that names one)."""
    sub = getattr(sys.modules.get("argparse"), "_SubParsersAction", None)
    prefix = getattr(parser, "prefix_chars", "-") or "-"
    for action in getattr(parser, "_actions", ()):
        if sub is not None and isinstance(action, sub):
            chosen = _chosen(action, ns, argv)
            if chosen is not None and chosen is not parser and depth < 4:
                _options(chosen, ns, argv, found, depth + 1)
            continue
        strings = action.option_strings
        if not strings:
            continue  # a positional: nothing to set by name
        for s in [action.dest] + list(strings):
            key = str(s).lstrip(prefix).lower().replace("-", "_")
            if any(k in key for k in _KEYS):
                found.append(action)
                break


def _name(t):
    return getattr(t, "__name__", "")


def _chosen(action, ns, argv):
    choices = action.choices
    if not isinstance(choices, dict):
        return None
    dest = action.dest
    if isinstance(dest, str) and dest != "==SUPPRESS==":
        name = getattr(ns, dest, None)
        return choices.get(name) if isinstance(name, str) else None
    for word in argv:
        if word in choices:
            return choices[word]
    return None


# ==== part "inside": at torch's DataLoader and the frameworks =============================
# --- frameworks and loaders ---------------------------------------------------------------
#
# The arguments object of a framework (_FRAMEWORKS) says the batch and accumulation the job
# got, and where OOMGUARD_PROBE_SET="ROW BATCH ACCUM" names its row, is given those before the
# framework reads them: in every process of the job alike (each rank reads the same variable).
# Nothing is set unless that variable asks. A DataLoader says its batch and where it was made.

_asked = False  # OOMGUARD_PROBE_SET read: None, or (row, batch, accum)
_reported = []  # weak references to the arguments objects reported (4 at most)
_accum_was = []  # [weak reference to a Trainer, its accumulation before the set]
_loaders = 0  # loader events sent


def _want(row):
    """(batch, accum) where OOMGUARD_PROBE_SET asks for them in this row, else None."""
    global _asked
    if _asked is False:
        _asked = _read_set(os.environ.get("OOMGUARD_PROBE_SET"))
    if _asked is not None and _asked[0] == row:
        return _asked[1:]
    return None


def _read_set(text):
    # Read leniently: anything but a row's name and two whole numbers from 1 to 2^31-1 asks for
    # nothing (and says nothing: the job runs as given).
    parts = (text or "").split()
    if len(parts) != 3 or not any(row[0] == parts[0] for row in _FRAMEWORKS):
        return None
    numbers = []
    for s in parts[1:]:
        if len(s) > 10 or s.strip("0123456789"):
            return None
        n = int(s)
        if not 1 <= n < (1 << 31):
            return None
        numbers.append(n)
    return parts[0], numbers[0], numbers[1]


def _on_module(name, module):
    if name == "torch.optim.optimizer":
        _on_optimizer(module)
        return
    if name == "torch":
        _on_torch(module)
        return
    if name == "torch.utils.data.dataloader":
        cls = getattr(module, "DataLoader", None)
        if isinstance(cls, type):
            _wrap(cls, "__init__", "loader", after=_loader_made)
        return
    for row in _FRAMEWORKS:
        cls = getattr(module, row[2], None) if row[1] == name else None
        if not isinstance(cls, type):
            continue
        if row[3] == "fields":
            _wrap(cls, "__post_init__", "framework", _fields_before, _fields_after, row)
        elif row[3] == "trainer":
            _wrap(cls, "__init__", "framework", _trainer_init, None, row)
            _wrap(cls, "fit", "framework", _trainer_fit, None, row)


def _fields_before(row, args, kwargs):
    # At the start of __post_init__: the dataclass's __init__ has stored the fields, the
    # framework has not validated or derived anything from them yet (a subclass such as TRL's
    # configs calls super().__post_init__() first).
    want = _want(row[0])
    if want is None:
        return args, kwargs, None
    obj = args[0]
    was = (getattr(obj, row[4], None), getattr(obj, row[5], None))
    setattr(obj, row[4], want[0])
    setattr(obj, row[5], want[1])
    return args, kwargs, was


def _fields_after(row, args, kwargs, was, result):
    obj = args[0]
    ev = {
        "row": row[0],
        "class": type(obj).__name__,
        "batch_field": row[4],
        "accum_field": row[5],
        "batch": _scalar(getattr(obj, row[4], None)),
        "accum": _scalar(getattr(obj, row[5], None)),
        "where": _where(("torch", row[1].split(".", 1)[0])),
        "set": was is not None,
    }
    if was is not None:
        ev["from_batch"] = _scalar(was[0])
        ev["from_accum"] = _scalar(was[1])
    _report(obj, ev)


def _trainer_init(row, args, kwargs):
    # The accumulation as Trainer.__init__'s argument, replaced before the call; a positional
    # one found as Lightning's own env-defaults wrapper finds it (the class's signature).
    want = _want(row[0])
    if want is None:
        return args, kwargs, None
    name = row[5]
    kwargs = dict(kwargs)
    was = kwargs.get(name, 1)  # 1: the default
    if name not in kwargs and len(args) > 1:
        import inspect  # loaded already: Lightning imports it

        names = list(inspect.signature(type(args[0])).parameters)
        at = names.index(name) + 1 if name in names else len(args)
        if at < len(args):
            _remember(args[0], args[at])
            return args[:at] + (want[1],) + args[at + 1 :], kwargs, None
    kwargs[name] = want[1]
    _remember(args[0], was)
    return args, kwargs, None


def _remember(trainer, was):
    import weakref  # loaded at start-up

    _accum_was[:] = [e for e in _accum_was if e[0]() is not None][-7:]
    _accum_was.append([weakref.ref(trainer), was])


def _trainer_fit(row, args, kwargs):
    # At the start of fit, where the model and the DataModule are known: the batch read (and
    # set) where Lightning's BatchSizeFinder reads and sets it (lightning_getattr/setattr:
    # the last of the module, its hparams, the DataModule, its hparams that has one; set in
    # all). Their own functions reach the DataModule through model.trainer only, which fit has
    # not attached yet: the same look-up by hand, with the DataModule given to fit.
    trainer = args[0]

    def arg(i, key):
        return kwargs[key] if key in kwargs else args[i] if len(args) > i else None

    model, loaders, data = arg(1, "model"), arg(2, "train_dataloaders"), arg(4, "datamodule")
    root = row[1].rsplit(".trainer.", 1)[0]
    datamodule = getattr(sys.modules.get(root + ".core.datamodule"), "LightningDataModule", ())
    if data is None and isinstance(loaders, datamodule):
        data = loaders  # fit(model, datamodule) passes it as train_dataloaders
    holders = []
    for obj in (model, data):
        if obj is None:
            continue
        if hasattr(obj, row[4]):
            holders.append(obj)
        # `hparams` makes an empty one where there is none: looked at only where there is.
        if "_hparams" in getattr(obj, "__dict__", ()):
            hp = obj.hparams
            if row[4] in hp:
                holders.append(hp)
    want = _want(row[0])
    was = _held(holders[-1], row[4]) if holders else None
    if want is not None:
        for h in holders:
            if isinstance(h, dict):
                h[row[4]] = want[0]
            else:
                setattr(h, row[4], want[0])
    ev = {
        "row": row[0],
        "class": type(trainer).__name__,
        "batch_field": row[4],
        "accum_field": row[5],
        "batch": _scalar(_held(holders[-1], row[4]) if holders else None),
        "accum": _scalar(getattr(trainer, row[5], None)),
        "where": _where(("torch", row[1].split(".", 1)[0])),
        "set": want is not None,
    }
    if want is not None:
        ev["from_batch"] = _scalar(was)
        ev["from_accum"] = _scalar(next((e[1] for e in _accum_was if e[0]() is trainer), None))
    _report(trainer, ev)
    return args, kwargs, None


def _held(holder, name):
    return holder[name] if isinstance(holder, dict) else getattr(holder, name)


def _report(obj, ev):
    """The framework event, once per object, 4 at most in a process."""
    import weakref  # loaded at start-up

    if len(_reported) >= 4 or any(r() is obj for r in _reported):
        return
    _reported.append(weakref.ref(obj))
    _send("framework", ev)


def _loader_made(data, args, kwargs, state, result):
    global _loaders
    batch = getattr(args[0], "batch_size", None)
    if _loaders < 4 and isinstance(batch, int) and not isinstance(batch, bool):
        _loaders += 1
        _send("loader", {"batch": batch, "where": _where(("torch",))})


def _where(packages):
    """file:line of the job's own code that called in: the first frame outside the probe, the
    packages named (the framework's, torch), the standard library and site-packages; where none
    is (a job installed in site-packages, `python -c`), the first outside the probe and the
    packages. The path relative to the working directory where it is under it, else the whole
    path where it is short."""
    lib = os.path.dirname(getattr(os, "__file__", "") or "") + os.sep
    sites = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
    mine = globals()
    first = None
    f = sys._getframe(1) if hasattr(sys, "_getframe") else None
    while f is not None:
        g = f.f_globals
        if g is not mine and str(g.get("__name__")).split(".", 1)[0] not in packages:
            name = f.f_code.co_filename or ""
            if first is None:
                first = f
            if not (name.startswith("<") or (lib != os.sep and name.startswith(lib))
                    or any(s in name for s in sites)):
                first = f
                break
        f = f.f_back
    if first is None:
        return ""
    name, line = first.f_code.co_filename or "", first.f_lineno or 0
    try:
        here = os.path.join(os.getcwd(), "")
    except OSError:
        here = None  # the working directory is gone
    if here and here != os.sep and name.startswith(here):
        name = name[len(here) :]  # as the job's command names a script in its directory
    place = "%s:%d" % (name, line)
    if len(place) > 200:
        place = "%s:%d" % (os.path.basename(name), line)
    return place[:200]
'''


if __name__ == "sitecustomize":
    try:
        _setup()
    except Exception as _e:
        _error("setup", _e)
    # Chain to the user's own sitecustomize, as site.py imports it: found on sys.path (without
    # the probe's directory now), run as module `sitecustomize`. Its exceptions go to site.py,
    # which prints and goes on as it would have; where there is none, the ImportError for
    # `sitecustomize` tells site.py there is none, and sys.modules is left without the probe.
    sys.modules.pop("sitecustomize", None)
    __import__("sitecustomize")
