//! The prescreen: a cheap look, before the signature table is compiled, at whether a text may
//! show that a running job hit its memory at all, by plain substring search for the phrases every
//! memory family needs (and the general rule's own look, [`general::mentions_running_out`]).
//!
//! It only answers "maybe" or "no": a "maybe" still needs the scan ([`super::scan_positions`])
//! to say what was found. It finds nothing itself and decides no class.

use super::general;

/// Phrases, in ASCII lower case, at least one of which every pattern of the families that say a
/// running job hit its memory (device and host OOM, a killed DataLoader worker, the kernel's or
/// Slurm's OOM kill) needs in a line it matches. [`may_show_memory_error`] looks for them before
/// anything is compiled: the signature table's regexes cost about 13 MiB of heap and 60-100 ms to
/// build, which a silent job's output (read by `--hang-timeout`) should not make oomguard pay
/// for the rest of its run. A new family of those classes adds its phrase here; the corpus
/// test (`every_memory_finding_passes_the_prescreen`) fails until it does.
const MEMORY_PHRASES: &[&str] = &[
    // Accelerator memory.
    "out of memory",
    "outofmemory",
    "out_of_memory",
    "out_of_me",
    "out_of_resources",
    "out_of_device_memory",
    "cudaerrormemoryallocation",
    "_alloc_failed",
    "2 vs. 0",
    "cudnn_status_not_supported",
    "would exceed allowed memory",
    "no available memory",
    // Not "kv cache" alone: vLLM names its KV cache size at every start.
    "stored in kv cache",
    "available kv cache memory",
    "not enough memory",
    "no executable batch size",
    "failed to cuda",
    "exceeded hbm",
    "exceeded vmem",
    "oom when allocating",
    "exhausted",
    // ONNX Runtime's arenas, ggml's buffers (issue 20's families).
    "bfcarena",
    "failed to allocate",
    // Host memory.
    "cpuallocator",
    "12 vs 0",
    "buy new ram",
    "[errno 12]",
    "cannot allocate memory",
    "enomem",
    "unable to allocate",
    "memoryerror",
    "bad_alloc",
    "killed due to",
    "memory usage threshold",
    "ray-oom-prevention",
    "memory budget",
    "error 1455",
    "paging file",
    "页面文件太小",
    "/dev/shm",
    "no space left",
    "shared memory segment",
    // DataLoader workers.
    "dataloader worker",
    "bus error",
    "/torch_",
    // The kernel's, a container runtime's and Slurm's OOM kills.
    "kill process",
    "killed process",
    "oom-kill",
    "oom_kill",
    "oom_reaper",
    "killed as a result of limit",
    "oomkill",
    "oom killed",
    "low on resource: memory",
    "memorypressure",
    "consumption of memory",
    "oom killer",
    "low memory!",
    "sending sig",
    "escalating to sigkill",
    "killing process",
    "bug_type",
    "killed by yarn",
    "systemd-oomd",
    "out-of-memory handler",
    "memory limit",
    "cancelled at",
    "srun: error",
    // LSF's and the notebooks' kills.
    "term_memlimit",
    "memory usage limit",
    "all available ram",
    "more memory than is available",
    // Issue 42's families: other device allocators, V8's heap, userspace killers and platforms.
    "erroroutofdevicememory",
    "vkallocatememory failed",
    "dxvkmemoryallocator",
    "device memory allocation of size",
    "mem_object_allocation_failure",
    "alloc_gmem",
    "device memory failed",
    "call_and_retry_last",
    "to the victim",
    "memory quota vastly",
    "signal: killed",
    "on signal 9 (killed)",
];

/// Whether `text` may show a memory finding at all (see [`MEMORY_PHRASES`]): false means no
/// device or host OOM, killed worker or OOM kill can be found in it, so the signature table need
/// not be compiled to say so. Lines are joined first, as the scan glues hard-wrapped ones.
pub(crate) fn may_show_memory_error(text: &str) -> bool {
    let mut joined = text.replace(['\n', '\r'], "");
    joined.make_ascii_lowercase();
    MEMORY_PHRASES.iter().any(|p| joined.contains(p))
        || general::mentions_running_out(text, &joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::scan::table::Family::{self, *};
    use crate::judge::scan::{scan_positions, split_lines};

    const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-corpus");

    fn is_memory(family: Family) -> bool {
        matches!(
            family,
            DeviceOom | HostOom | WorkerKilled | KernelOomKill | SlurmOom
        )
    }

    #[test]
    fn every_memory_finding_passes_the_prescreen() {
        let mut checked = 0;
        let held_out = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oom-heldout");
        let corpus = std::fs::read_dir(CORPUS).expect("the OOM corpus is there");
        let held_out = std::fs::read_dir(held_out).expect("the held-out set is there");
        for entry in corpus.chain(held_out) {
            let path = entry.unwrap().path();
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            // Each finding's own line, and the whole file as `--hang-timeout` hands it over.
            for (at, finding) in scan_positions(&text) {
                if !is_memory(finding.family) {
                    continue;
                }
                checked += 1;
                let lines = split_lines(&text);
                let around = lines[at.saturating_sub(1)..(at + 2).min(lines.len())].join("\n");
                assert!(
                    may_show_memory_error(&around),
                    "{} ({}): {:?}",
                    path.display(),
                    finding.name,
                    finding.line
                );
            }
        }
        assert!(
            checked > 200,
            "only {checked} memory findings in the corpus"
        );
        for (text, families) in crate::judge::scan::tests::TABLE {
            if families.iter().any(|f| is_memory(*f)) {
                assert!(may_show_memory_error(text), "{text:?}");
            }
        }
    }

    #[test]
    fn the_prescreen_lets_ordinary_training_output_through_unread() {
        // (output, whether it may show a memory error)
        let table = [
            ("ready 4242\n", false),
            ("INFO 05-01 12:00:00 gpu_executor.py:122] # GPU blocks: 7436, GPU KV cache size: 118976 tokens\n", false),
            ("step 1455 | loss 1.9\n", false),
            (
                "step 100 | loss 2.31 | mem 12.3G | max_memory_allocated 10.2 GiB\n",
                false,
            ),
            (
                "Epoch 3: 100%|██████████| 500/500 [01:02<00:00, 8.01it/s, gpu_mem=31.2G]\n",
                false,
            ),
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
                true,
            ),
            // Hard-wrapped by a terminal, and in another case.
            (
                "torch.OutOfMemoryError: CUDA out of mem\nory. Tried to allocate\n",
                true,
            ),
            ("MEMORYERROR\n", true),
            (
                "Memory cgroup out of memory: Killed process 15617 (python3)\n",
                true,
            ),
        ];
        for (text, want) in table {
            assert_eq!(may_show_memory_error(text), want, "{text:?}");
        }
    }
}
