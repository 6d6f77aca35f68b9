# oomguard's probe. oomguard writes this file into a private directory that it puts first on
# PYTHONPATH, so that every Python process of the job imports it at start-up (site.py imports
# `sitecustomize`). It reports the job's optimizer steps and memory, as JSON lines on a pipe that
# oomguard reads, and changes nothing else:
#
# * at start it imports nothing (only `os` and `sys`, which are loaded before site runs), takes
#   its own directory off sys.path (PYTHONPATH in the environment stays as given, so children
#   load the probe too), puts one finder first on sys.meta_path, and runs the user's own
#   `sitecustomize` further down sys.path exactly as site.py would have;
# * the finder watches two names only, `torch` and `torch.optim.optimizer`, delegates them to
#   the finders after it and, when the job itself imports them, calls back once each has run:
#   then the probe finds oomguard's pipe, registers the global optimizer-step post-hook, sends
#   "hooked", queues PyTorch's CUDA out-of-memory observer for when the job initializes CUDA,
#   and takes the finder off sys.meta_path;
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

_WATCH = ("torch", "torch.optim.optimizer")
_MAX_LINE = 4096

_fd_n = -1  # OOMGUARD_PROBE_FD
_ino = -1  # OOMGUARD_PROBE_PIPE
_chan = -1  # the descriptor written to; -1: not looked for yet
_chan_owned = False  # _chan was opened by the probe (an ancestor's /proc path)
_chan_lost = False  # the channel went bad once already
_quiet = True  # until _setup finds the environment
_finder = None
_hook = None  # the RemovableHandle of the step hook
_done = False  # "hooked" sent and the observer queued
_time = None  # time.time, bound once torch is imported
_mono = None  # time.monotonic
_steps = 0  # optimizer steps done in this process
_sent_step = 0  # the last step count sent
_last_sent = 0.0  # monotonic time of the last step event


# --- the import hook ----------------------------------------------------------------------


class _OomguardProbeFinder:
    """First on sys.meta_path: for `torch` and `torch.optim.optimizer` it asks the finders after
    it for the spec and has its loader call back once the module has run; every other name it
    leaves to them at once."""

    _oomguard_probe = True

    def find_spec(self, name, path=None, target=None):
        if name not in _WATCH or _quiet:
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


def _late():
    """Compile the rest of the probe (_LATE, below) into this namespace, once."""
    if "_on_optimizer" not in globals():
        exec(compile(_LATE, __file__, "exec"), globals())


def _error(where, err):
    try:
        _late()
        _fail(where, err)
    except Exception:
        pass


def _loaded(name, module):
    if _quiet:
        return
    try:
        _late()
        if name == "torch.optim.optimizer":
            _on_optimizer(module)
        else:
            _on_torch(module)
    except Exception as e:
        _error("hook", e)


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
    opt = sys.modules.get("torch.optim.optimizer")
    if opt is not None:  # imported before site ran (a .pth file)
        _loaded("torch.optim.optimizer", opt)
        return
    _finder = _OomguardProbeFinder()
    sys.meta_path.insert(0, _finder)


# --- the rest, compiled when the job imports torch ------------------------------------------
#
# Everything below runs only in a process that imports torch, so it is kept as text and compiled
# then, into this module's namespace (_late): a process that never imports torch compiles only
# the part above (where bytecode is not cached, PYTHONDONTWRITEBYTECODE=1 as in many images, the
# whole file would cost ~2 ms at every start of every Python process of the job).

_LATE = r'''
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
    _unfind()
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
