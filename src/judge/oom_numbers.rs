//! The numbers in an accelerator out-of-memory message: how much the job tried to allocate,
//! the card's capacity, what was free, what the process had in use, what PyTorch had allocated
//! and what it held reserved but unallocated. PyTorch's CUDA, HIP, XPU and MPS messages across
//! versions (the 1.0 `cached` format, the 1.5 `reserved in total` format, the 2.x sentences with
//! `this process has` and `allowed`), JAX/XLA's `RESOURCE_EXHAUSTED` sizes and TensorFlow's
//! `OOM when allocating tensor with shape[...]`. All sizes in bytes.
//!
//! Pure text in, numbers out: whether the attempt died of that message is
//! [`crate::judge::classify`]'s call, and what the numbers mean for the next batch is
//! [`crate::decide::fit`]'s.

use std::sync::OnceLock;

use regex::Regex;

/// Which framework wrote the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// PyTorch's caching allocator (CUDA, HIP, XPU).
    PyTorch,
    /// PyTorch on Apple's MPS backend.
    Mps,
    Jax,
    TensorFlow,
}

/// The numbers of one out-of-memory message; each `None` where the message does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomNumbers {
    pub source: Source,
    /// The allocation that failed.
    pub tried_bytes: Option<u64>,
    /// The device's total capacity (MPS: its `max allowed`).
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// Everything this process held on the device, PyTorch's and the driver's (`this process
    /// has X memory in use`; MPS: allocated + other allocations).
    pub process_bytes: Option<u64>,
    /// What other processes held on the device (`Process N has X memory in use`).
    pub others_bytes: Option<u64>,
    /// The device the allocation failed on, as the framework numbers it (`GPU 0 has a total
    /// capacity`: CUDA's ordinal, which is NVML's index only without a renumbering).
    pub device: Option<u32>,
    /// Live tensors (`allocated by PyTorch`, `already allocated`).
    pub allocated_bytes: Option<u64>,
    /// Held by PyTorch's cache but unallocated: memory fragmentation can waste it.
    pub reserved_unallocated_bytes: Option<u64>,
    /// A per-process cap (`set_per_process_memory_fraction`): `X allowed;`.
    pub allowed_bytes: Option<u64>,
}

impl OomNumbers {
    fn new(source: Source) -> OomNumbers {
        OomNumbers {
            source,
            tried_bytes: None,
            total_bytes: None,
            free_bytes: None,
            process_bytes: None,
            others_bytes: None,
            device: None,
            allocated_bytes: None,
            reserved_unallocated_bytes: None,
            allowed_bytes: None,
        }
    }

    /// What the process held when the allocation failed: its own total where the message
    /// gives it, else what PyTorch had reserved (allocated + cached), else what it had allocated.
    pub fn in_use_bytes(&self) -> Option<u64> {
        self.process_bytes.or_else(|| {
            let allocated = self.allocated_bytes?;
            Some(allocated.saturating_add(self.reserved_unallocated_bytes.unwrap_or(0)))
        })
    }

    /// A lower bound on what the attempt needed: what it held plus what it asked for.
    pub fn need_bytes(&self) -> Option<u64> {
        let tried = self.tried_bytes?;
        Some(self.in_use_bytes().unwrap_or(0).saturating_add(tried))
    }

    /// The most the process could have held: its per-process cap where set, else what it held
    /// plus what was free (the card less the driver's share and other processes), else the
    /// card's capacity less what other processes held.
    pub fn limit_bytes(&self) -> Option<u64> {
        let room = match (self.in_use_bytes(), self.free_bytes) {
            (Some(in_use), Some(free)) => Some(in_use.saturating_add(free)),
            _ => self
                .total_bytes
                .map(|t| t.saturating_sub(self.others_bytes.unwrap_or(0))),
        };
        match (room, self.allowed_bytes) {
            (Some(room), Some(allowed)) => Some(room.min(allowed)),
            (room, allowed) => room.or(allowed),
        }
    }

    /// The most the process could have held with the card to itself: [`OomNumbers::limit_bytes`]
    /// plus what the other processes the message names held, where it also names itself apart
    /// (`this process has`: otherwise one of those named may be itself) and no per-process cap
    /// bounds it. A shared card's neighbours are not the job's size.
    pub fn alone_limit_bytes(&self) -> Option<u64> {
        let limit = self.limit_bytes()?;
        Some(
            match (self.process_bytes, self.others_bytes, self.allowed_bytes) {
                (Some(_), Some(others), None) => limit.saturating_add(others),
                _ => limit,
            },
        )
    }

    /// PyTorch's allocator held at least as much reserved-but-unallocated memory as the failed
    /// allocation asked for: the memory was there, in pieces (`expandable_segments` helps).
    pub fn fragmented(&self) -> bool {
        matches!(self.source, Source::PyTorch)
            && matches!(
                (self.reserved_unallocated_bytes, self.tried_bytes),
                (Some(reserved), Some(tried)) if tried > 0 && reserved >= tried
            )
    }
}

/// A size as these messages print it: `98.00 MiB`, `1.02 GB`, `0 bytes`, `2.99GiB`. Decimal
/// unit names count in powers of 1024 too: PyTorch (MPS) and TensorFlow print binary sizes
/// with them.
fn size_bytes(number: &str, unit: &str) -> Option<u64> {
    let value: f64 = number.parse().ok()?;
    let power = match unit.to_ascii_lowercase().as_str() {
        "b" | "bytes" | "byte" => 0,
        "k" | "kb" | "kib" => 1,
        "m" | "mb" | "mib" => 2,
        "g" | "gb" | "gib" => 3,
        "t" | "tb" | "tib" => 4,
        _ => return None,
    };
    let bytes = value * 1024f64.powi(power);
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes.round() as u64)
}

/// A size pattern: number and unit as two groups.
const SIZE: &str = r"(\d+(?:\.\d+)?)\s*(bytes|[KMGT]i?B|B)";

struct Patterns {
    /// Where a message starts; the last match in the tail is the one read.
    anchor: Regex,
    tried: Regex,
    total: Regex,
    free: Regex,
    process: Regex,
    others: Regex,
    device: Regex,
    allocated: Regex,
    reserved_unallocated: Regex,
    reserved_total: Regex,
    cached: Regex,
    allowed: Regex,
    mps: Regex,
    exact_bytes: Regex,
    tf_shape: Regex,
}

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let re = |p: &str| Regex::new(&p.replace("SIZE", SIZE)).expect("the pattern compiles");
        Patterns {
            anchor: Regex::new(
                r"(?i)(out of memory\.? tried to allocate|MPS backend out of memory|out of memory while trying to allocate|RESOURCE_EXHAUSTED: Failed to allocate request for|OOM when allocating tensor)",
            )
            .expect("the pattern compiles"),
            tried: re(r"(?i)tried to allocate SIZE"),
            total: re(r"(?i)(?:total capacity of SIZE|SIZE total capacity)"),
            free: re(r"(?i)(?:of which SIZE is free|SIZE free;)"),
            process: re(r"(?i)this process has SIZE memory in use"),
            others: re(r"Process (\d+) has SIZE memory in use"),
            device: Regex::new(r"(?i)GPU (\d+) has a total capacity").expect("the pattern compiles"),
            allocated: re(r"(?i)(?:SIZE is allocated by PyTorch|SIZE already allocated)"),
            reserved_unallocated: re(r"(?i)SIZE is reserved by PyTorch but unallocated"),
            reserved_total: re(r"(?i)SIZE\s*reserved in total by PyTorch"),
            cached: re(r"(?i)SIZE cached\)"),
            allowed: re(r"(?i)SIZE allowed;"),
            mps: re(r"MPS allocated: SIZE, other allocations: SIZE, max allowed: SIZE"),
            exact_bytes: Regex::new(
                r"(?i)(?:trying to allocate (\d+) bytes|Failed to allocate request for \S+ \((\d+)B\))",
            )
            .expect("the pattern compiles"),
            tf_shape: Regex::new(r"(?i)OOM when allocating tensor with shape\s*\[([\d,\s]*)\]\s*and type (\w+)")
                .expect("the pattern compiles"),
        }
    })
}

/// The size captured by `re` (groups 1 and 2, or 3 and 4 for its second alternative).
fn size_in(re: &Regex, text: &str) -> Option<u64> {
    let caps = re.captures(text)?;
    let (number, unit) = match (caps.get(1), caps.get(2)) {
        (Some(n), Some(u)) => (n, u),
        _ => (caps.get(3)?, caps.get(4)?),
    };
    size_bytes(number.as_str(), unit.as_str())
}

/// Bytes per element of a TensorFlow dtype name.
fn dtype_bytes(name: &str) -> Option<u64> {
    Some(match name {
        "double" | "int64" | "uint64" | "complex64" => 8,
        "float" | "int32" | "uint32" => 4,
        "half" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" | "bool" => 1,
        _ => return None,
    })
}

/// The message text from `start`: its line, and the lines after it while the message has not
/// reached one of its own endings (a terminal hard-wraps PyTorch's one long line; the wrapped
/// pieces are joined without the line break, which fell where the terminal's width did).
fn message_at(tail: &str, start: usize) -> String {
    const ENDINGS: [&str; 8] = [
        "environment-variables)",
        "ALLOC_CONF",
        "cached memory.",
        "cached)",
        "by PyTorch)",
        "private pool.",
        "bytes.",
        "ordinal",
    ];
    let mut text = String::new();
    for (n, line) in tail[start..].lines().enumerate() {
        if n > 3 {
            break;
        }
        text.push_str(line.trim_end_matches('\r'));
        if ENDINGS.iter().any(|e| line.contains(e)) || !wraps(line) {
            break;
        }
    }
    text
}

/// Whether a line looks cut by a terminal: long, and not ending a sentence.
fn wraps(line: &str) -> bool {
    line.len() >= 79 && !line.trim_end().ends_with(['.', ')'])
}

/// The other processes a PyTorch message names (`Process 4242 has 40.00 GiB memory in use`),
/// each PID with what it held.
fn other_processes(text: &str) -> Vec<(u32, u64)> {
    patterns()
        .others
        .captures_iter(text)
        .filter_map(|c| {
            let pid = c.get(1)?.as_str().parse().ok()?;
            Some((pid, size_bytes(c.get(2)?.as_str(), c.get(3)?.as_str())?))
        })
        .collect()
}

/// The text of the last out-of-memory message in `tail`, from the start of its line.
fn last_message(tail: &str) -> Option<(String, &str)> {
    let anchor = patterns().anchor.find_iter(tail).last()?;
    // From the start of the anchor's line: the MPS numbers come before "Tried to allocate".
    let line_start = tail[..anchor.start()].rfind('\n').map_or(0, |i| i + 1);
    Some((message_at(tail, line_start), anchor.as_str()))
}

/// The other processes the last out-of-memory message in `tail` names, with what each held
/// (PyTorch lists them since 2.1): a shared card's neighbours at the moment of the failure.
pub fn others_named(tail: &str) -> Vec<(u32, u64)> {
    last_message(tail).map_or_else(Vec::new, |(text, _)| other_processes(&text))
}

/// The numbers of the last out-of-memory message in `tail`, or `None` where it has none with
/// a size.
pub fn parse(tail: &str) -> Option<OomNumbers> {
    let p = patterns();
    let (text, anchor) = last_message(tail)?;
    let matched = anchor.to_ascii_lowercase();
    let source = if matched.contains("mps") {
        Source::Mps
    } else if matched.contains("oom when allocating") {
        Source::TensorFlow
    } else if matched.contains("tried to allocate") {
        Source::PyTorch
    } else {
        Source::Jax
    };
    let mut n = OomNumbers::new(source);
    match source {
        Source::PyTorch => {
            n.tried_bytes = size_in(&p.tried, &text);
            n.total_bytes = size_in(&p.total, &text);
            n.free_bytes = size_in(&p.free, &text);
            n.process_bytes = size_in(&p.process, &text);
            n.allocated_bytes = size_in(&p.allocated, &text);
            n.allowed_bytes = size_in(&p.allowed, &text);
            let others = other_processes(&text);
            n.others_bytes = (!others.is_empty()).then(|| others.iter().map(|(_, b)| b).sum());
            n.device = p
                .device
                .captures(&text)
                .and_then(|c| c.get(1)?.as_str().parse().ok());
            n.reserved_unallocated_bytes = size_in(&p.reserved_unallocated, &text)
                .or_else(|| {
                    // 1.5 to 2.0: the total reserved, allocated included.
                    let total = size_in(&p.reserved_total, &text)?;
                    Some(total.saturating_sub(n.allocated_bytes.unwrap_or(0)))
                })
                // 1.0 to 1.4: `cached` is the reserved memory not allocated.
                .or_else(|| size_in(&p.cached, &text));
        }
        Source::Mps => {
            n.tried_bytes = size_in(&p.tried, &text);
            if let Some(c) = p.mps.captures(&text) {
                let at = |i: usize| size_bytes(c.get(i)?.as_str(), c.get(i + 1)?.as_str());
                n.allocated_bytes = at(1);
                n.process_bytes = at(1)
                    .zip(at(3))
                    .map(|(alloc, other)| alloc.saturating_add(other));
                n.total_bytes = at(5);
                n.allowed_bytes = at(5);
            }
        }
        Source::Jax => {
            let c = p.exact_bytes.captures(&text)?;
            n.tried_bytes = c.get(1).or(c.get(2))?.as_str().parse().ok();
        }
        Source::TensorFlow => {
            let c = p.tf_shape.captures(&text)?;
            let per = dtype_bytes(c.get(2)?.as_str())?;
            let mut elements: u64 = 1;
            for dim in c.get(1)?.as_str().split(',') {
                elements = elements.checked_mul(dim.trim().parse().ok()?)?;
            }
            n.tried_bytes = elements.checked_mul(per);
        }
    }
    n.tried_bytes.is_some().then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: f64 = 1024.0;
    const MIB: f64 = KIB * 1024.0;
    const GIB: f64 = MIB * 1024.0;

    fn b(x: f64) -> Option<u64> {
        Some(x.round() as u64)
    }

    fn corpus(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/oom-corpus/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// Real messages from the corpus, with the numbers each holds.
    #[test]
    fn the_corpus_messages_give_their_numbers() {
        // (file, source, tried, total, free, process, allocated, reserved-unallocated, allowed)
        type Row = (&'static str, Source, [Option<u64>; 7]);
        let table: &[Row] = &[
            (
                "cuda_oom__torchrun_rank_prefixed.txt",
                Source::PyTorch,
                [
                    b(158.0 * MIB),
                    b(23.69 * GIB),
                    b(115.69 * MIB),
                    None,
                    b(22.14 * GIB),
                    b(910.35 * MIB),
                    None,
                ],
            ),
            (
                "cuda_oom__v2_5_multi_process_info.txt",
                Source::PyTorch,
                [
                    b(86.0 * MIB),
                    b(23.64 * GIB),
                    b(264.0 * MIB),
                    b(8.04 * GIB),
                    b(7.63 * GIB),
                    b(40.11 * MIB),
                    None,
                ],
            ),
            (
                "cuda_oom__app_wrapper_message_only.txt",
                Source::PyTorch,
                [
                    b(98.0 * MIB),
                    b(4.0 * GIB),
                    b(2.86 * GIB),
                    None,
                    b(254.49 * MIB),
                    b(97.51 * MIB),
                    None,
                ],
            ),
            (
                "cuda_oom__hip_out_of_memory_allowed_private_pools.txt",
                Source::PyTorch,
                [
                    b(2.0 * MIB),
                    b(255.98 * GIB),
                    b(244.65 * GIB),
                    None,
                    b(1017.01 * MIB),
                    b(54.99 * MIB),
                    b(1.05 * GIB),
                ],
            ),
            (
                "xpu_oom__pytest_set_per_process_memory_fraction_allowed.txt",
                Source::PyTorch,
                [
                    b(8.11 * GIB),
                    b(16.54 * GIB),
                    b(16.54 * GIB),
                    None,
                    Some(0),
                    Some(0),
                    b(8.27 * GIB),
                ],
            ),
            (
                "cuda_oom__v1_5_reserved_format_detectron2.txt",
                Source::PyTorch,
                [
                    b(1.71 * GIB),
                    b(31.72 * GIB),
                    b(1.58 * GIB),
                    None,
                    b(23.58 * GIB),
                    b((29.08 - 23.58) * GIB),
                    None,
                ],
            ),
            (
                "cuda_oom__v2_0_cuda_OutOfMemoryError_max_split_size.txt",
                Source::PyTorch,
                [
                    b(14.0 * MIB),
                    b(6.0 * GIB),
                    Some(0),
                    None,
                    b(5.18 * GIB),
                    b((5.35 - 5.18) * GIB),
                    None,
                ],
            ),
            (
                "cuda_oom__terminal_hard_wrapped.txt",
                Source::PyTorch,
                [
                    b(2.11 * GIB),
                    b(8.0 * GIB),
                    Some(0),
                    None,
                    b(19.84 * GIB),
                    b((22.26 - 19.84) * GIB),
                    None,
                ],
            ),
            (
                "deepspeed_oom__zero2_init_optimizer_states_cached_format.txt",
                Source::PyTorch,
                [
                    b(8.52 * GIB),
                    b(31.72 * GIB),
                    b(5.39 * GIB),
                    None,
                    b(25.59 * GIB),
                    b(14.59 * MIB),
                    None,
                ],
            ),
            (
                "mps_oom__comfyui_gib_units_no_exception_class.txt",
                Source::Mps,
                [
                    b(292.5 * MIB),
                    b(27.2 * GIB),
                    None,
                    Some(b(9.57 * GIB).unwrap() + b(17.35 * GIB).unwrap()),
                    b(9.57 * GIB),
                    None,
                    b(27.2 * GIB),
                ],
            ),
            (
                "xla_oom__jax_failed_to_allocate_request.txt",
                Source::Jax,
                [Some(3206250496), None, None, None, None, None, None],
            ),
            (
                "tf_oom__tf2_eager_op_mul_bfc_summary.txt",
                Source::TensorFlow,
                [
                    Some(3 * 3 * 512 * 1024 * 4),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                ],
            ),
        ];
        for (file, source, want) in table {
            let n = parse(&corpus(file)).unwrap_or_else(|| panic!("{file}: no numbers"));
            let got = [
                n.tried_bytes,
                n.total_bytes,
                n.free_bytes,
                n.process_bytes,
                n.allocated_bytes,
                n.reserved_unallocated_bytes,
                n.allowed_bytes,
            ];
            assert_eq!((n.source, got), (*source, *want), "{file}");
        }
    }

    #[test]
    fn other_processes_and_the_limit_the_process_had() {
        let n = parse(&corpus("cuda_oom__v2_5_multi_process_info.txt")).unwrap();
        assert_eq!(
            n.others_bytes,
            Some(b(419.48 * MIB).unwrap() + b(14.85 * GIB).unwrap())
        );
        // What it held plus what was free: the card less the others.
        assert_eq!(
            n.limit_bytes(),
            Some(b(8.04 * GIB).unwrap() + b(264.0 * MIB).unwrap())
        );
        assert_eq!(
            n.need_bytes(),
            Some(b(8.04 * GIB).unwrap() + b(86.0 * MIB).unwrap())
        );
        // Alone on the card it would also have had what the others held.
        assert_eq!(
            n.alone_limit_bytes(),
            Some(n.limit_bytes().unwrap() + n.others_bytes.unwrap())
        );
        assert_eq!(
            others_named(&corpus("cuda_oom__v2_5_multi_process_info.txt")).len(),
            2
        );
        // A per-process cap bounds the limit, alone or not.
        let n = parse(&corpus(
            "xpu_oom__pytest_set_per_process_memory_fraction_allowed.txt",
        ))
        .unwrap();
        assert_eq!(n.limit_bytes(), b(8.27 * GIB));
        assert_eq!(n.alone_limit_bytes(), b(8.27 * GIB));
        // Without its own `this process has`, one of the named may be itself: no addition.
        let rank = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 1 has a total capacity of 23.69 GiB of which 115.69 MiB is free. Process 21422 has 23.57 GiB memory in use. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated.\n";
        let n = parse(rank).unwrap();
        assert_eq!(n.alone_limit_bytes(), n.limit_bytes());
        assert_eq!(n.device, Some(1));
    }

    #[test]
    fn fragmentation_is_reserved_unallocated_at_least_the_request() {
        // (message, fragmented)
        let table = [
            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 100.00 MiB is free. Including non-PyTorch memory, this process has 23.50 GiB memory in use. Of the allocated memory 20.10 GiB is allocated by PyTorch, and 2.90 GiB is reserved by PyTorch but unallocated.", true),
            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 115.69 MiB is free. Of the allocated memory 22.14 GiB is allocated by PyTorch, and 158.00 MiB is reserved by PyTorch but unallocated.", true),
            ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 158.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 115.69 MiB is free. Of the allocated memory 22.14 GiB is allocated by PyTorch, and 157.99 MiB is reserved by PyTorch but unallocated.", false),
            ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3743729664 bytes.", false),
        ];
        for (text, want) in table {
            assert_eq!(parse(text).unwrap().fragmented(), want, "{text}");
        }
        let n = parse(&corpus("cuda_oom__torchrun_rank_prefixed.txt")).unwrap();
        assert!(
            n.fragmented(),
            "910 MiB reserved-unallocated ≥ 158 MiB asked"
        );
        let n = parse(&corpus("cuda_oom__v2_5_multi_process_info.txt")).unwrap();
        assert!(!n.fragmented(), "40 MiB < 86 MiB");
    }

    #[test]
    fn the_last_message_counts_and_texts_without_sizes_give_none() {
        let two = "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 8.00 GiB total capacity; 6.00 GiB already allocated; 0 bytes free; 6.50 GiB reserved in total by PyTorch)\n\
                   RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 8.00 GiB total capacity; 5.00 GiB already allocated; 0 bytes free; 5.50 GiB reserved in total by PyTorch)\n";
        assert_eq!(parse(two).unwrap().tried_bytes, b(2.0 * GIB));
        for text in [
            "",
            "RuntimeError: CUDA error: out of memory",
            "MemoryError",
            "Killed",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
        let mps = "RuntimeError: MPS backend out of memory (MPS allocated: 18.07 GB, other allocations: 1.18 GB, max allowed: 18.13 GB). Tried to allocate 1.02 GB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).";
        let n = parse(mps).unwrap();
        assert_eq!(
            (n.source, n.tried_bytes, n.process_bytes, n.limit_bytes()),
            (
                Source::Mps,
                b(1.02 * GIB),
                Some(b(18.07 * GIB).unwrap() + b(1.18 * GIB).unwrap()),
                b(18.13 * GIB)
            )
        );
        let jax = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.";
        assert_eq!(parse(jax).unwrap().tried_bytes, Some(7406166528));
    }
}
