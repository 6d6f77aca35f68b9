//! The signature table: every family of out-of-memory and kill messages oomguard recognises,
//! as data. One entry per family (`SIGNATURES`): its name, the class of failure it speaks for
//! ([`Family`]), its patterns, a veto, and, for a message that names no device, the patterns of
//! the lines around it that decide its class; beside it, the patterns of a shell's report that
//! its job died of SIGKILL. Adding a family is one entry here plus a corpus file that only it
//! matches.
//!
//! This module only holds the patterns. Compiling them and running them over text (prefixes,
//! hard-wraps, repeats) is the parent module's job, and weighing what they find is
//! [`crate::judge::classify`]'s.

/// glibc's translations of strsignal(SIGKILL), "Killed", as bash prints it for a job killed by
/// SIGKILL under each locale: read from glibc's own message catalogues (the `libc.mo` files of
/// Debian's libc-l10n 2.36, msgid "Killed"): zh_CN, zh_TW, ja, ko, de, fr, es, pt/pt_BR, it, ru,
/// uk, be, bg, sr, pl, cs, sk, sl, hr, hu, nl, da, nb, sv, fi, el, eo, ca, gl, id, lt, tr, vi.
/// A macro so the signature patterns stay `&'static str` literals.
macro_rules! killed_words {
    () => {
        r"Killed|已杀死|強制結束|強制終了|죽었음|Getötet|Processus arrêté|Terminado \(killed\)|Morto|Ucciso|Убито|Вбито|Забіты|Безусловно прекъснат|Убијен|Unicestwiony|Zabit \(SIGKILL\)|Zabitý|Pobit|Ubijen|Kilőve|Geëlimineerd|Dræbt|Drept|Dödad|Tapettu|Σκοτώθηκε|Buĉita|Matat|Matado|Terbunuh|Nutraukta \(killed\)|Süreç durduruldu|Bị buộc kết thúc"
    };
}

/// Which kind of failure a matched line speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Accelerator memory (CUDA, HIP, XPU, MPS, TPU/XLA, TensorFlow GPU allocator) ran out
    /// inside the process, which reported it itself.
    DeviceOom,
    /// Host RAM ran out inside the process, which reported it itself (allocator errors, ENOMEM,
    /// Python `MemoryError`, `std::bad_alloc`, Ray's memory monitor).
    HostOom,
    /// A PyTorch DataLoader worker died of SIGKILL or SIGBUS, or shared memory (`/dev/shm`)
    /// filled up under the workers.
    WorkerKilled,
    /// The kernel's OOM killer (or a container runtime reporting it) killed a process, or a
    /// scheduler or hosted notebook (YARN, LSF, Colab, Kaggle) killed the job for its memory.
    KernelOomKill,
    /// Slurm's memory enforcement (cgroup or job accounting) killed the job or step.
    SlurmOom,
    /// Something reports a death by SIGKILL without saying who sent it (a shell's `Killed`,
    /// a launcher's `exitcode: -9`, `exit code 137`).
    KilledBySigkill,
}

/// What a signature family's match stands for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Role {
    /// A finding on its own.
    Finding,
    /// Slurm's "Exceeded job memory limit": printed even for jobs that go on to succeed, so it
    /// only counts next to another sign that Slurm stopped the job.
    SlurmLimitHit,
    /// Slurm stopped the job or a task (a `CANCELLED` banner, srun's `task N: Killed`): never a
    /// finding itself, only what makes a [`Role::SlurmLimitHit`] one.
    SlurmStopped,
}

/// One named family of signatures: the messages one program (or one of its code paths) prints
/// for one kind of failure. Adding a family is one entry in [`SIGNATURES`] plus a corpus file
/// in tests/fixtures/oom-corpus that only it matches (a test checks this).
pub(crate) struct Signature {
    /// snake_case name, unique in the table, shown as evidence (`cuda_runtime_oom`).
    pub name: &'static str,
    /// The class of failure a match speaks for.
    pub class: Family,
    pub(super) role: Role,
    /// Any of these matching a line is a match of the family.
    pub(super) patterns: &'static [&'static str],
    /// Cancels a match when found in the same line or the start of the next one (a hard-wrap
    /// may push the veto phrase there).
    pub(super) veto: Option<&'static str>,
    /// Anchored patterns that must see a whole line: not tried on glued neighbours.
    pub(super) whole_line: bool,
    /// For a message that does not say which memory ran out: the lines around it that do
    /// decide the class instead of `class`.
    pub(super) nearby: Option<&'static Nearby>,
}

/// Where a family's class comes from the lines around its match: the nearest line (the
/// matched one first, then outwards, earlier before later) within `lines` that matches one of
/// `by` gives its class; with none, the family's own class stands.
pub(crate) struct Nearby {
    pub(super) lines: usize,
    pub(super) by: &'static [(&'static str, Family)],
    /// What a line one of `by` matched must also show (a figure its words cannot compare);
    /// a line it refuses says nothing. [`always`] for most.
    pub(super) holds: fn(&str) -> bool,
}

/// Any line of a [`Nearby`]'s `by` speaks.
fn always(_: &str) -> bool {
    true
}

const fn sig(name: &'static str, class: Family, patterns: &'static [&'static str]) -> Signature {
    Signature {
        name,
        class,
        role: Role::Finding,
        patterns,
        veto: None,
        whole_line: false,
        nearby: None,
    }
}

const fn sig_unless(
    name: &'static str,
    class: Family,
    patterns: &'static [&'static str],
    veto: &'static str,
) -> Signature {
    Signature {
        veto: Some(veto),
        ..sig(name, class, patterns)
    }
}

const fn line_sig(
    name: &'static str,
    class: Family,
    patterns: &'static [&'static str],
) -> Signature {
    Signature {
        whole_line: true,
        ..sig(name, class, patterns)
    }
}

use Family::*;

/// A host-sounding allocation failure (`MemoryError`, `std::bad_alloc`) whose line names the
/// GPU API that failed is the device's: the device entry on the same line decides.
const GPU_ALLOCATOR_ERROR: &str =
    r"(?i)cudaError|\bCUDA error\b|hipError|\bthrust::|\bcuMemAlloc|\bcudaMalloc|\bhipMalloc";

/// Thrust (CUDA's C++ library) throws its own `bad_alloc` for device memory; two threads
/// dying at once print it a line or two above the `what():` of a bare `std::bad_alloc`.
const THRUST_ABOVE: Nearby = Nearby {
    lines: 2,
    by: &[(
        r"\bthrust::(?:system::)?(?:detail::)?bad_alloc\b",
        DeviceOom,
    )],
    holds: always,
};

/// Hints and tutorials mention OOM without one happening ("to avoid out of memory, ...").
const HINT_VETO: &str = r"(?i)\b(?:avoid|prevent|if you|when you|reduce the chance)\b[^.]{0,40}out of memory|not a failure";

/// TensorFlow names the allocator and device; CPU ones mean host RAM, not the accelerator.
const TF_CPU: &str = r"(?i)device:CPU|allocator[ (]+cpu\b";

/// ONNX Runtime's arena failure names no device; its verbose log names the arena it extends
/// ("Extending BFCArena for Cuda.", "Reserving memory in BFCArena for Cpu size: ...") and
/// errors name the execution provider. Pinned staging buffers (`CudaPinned`) are host RAM.
const ORT_PROVIDER: Nearby = Nearby {
    lines: 30,
    by: &[
        (
            r"(?i)\bBFCArena for (?:Cpu|CudaPinned|HipPinned)\b|\bCPUExecutionProvider\b",
            HostOom,
        ),
        (
            r"(?i)\bBFCArena for (?:Cuda|Hip)\b|\b(?:CUDA|ROCM|MIGraphX|TensorRT|Dml)ExecutionProvider\b",
            DeviceOom,
        ),
    ],
    holds: always,
};

/// The GPU backends a ggml buffer is named after ("CUDA0", "ROCm0", "SYCL0", "Vulkan0", ...).
macro_rules! ggml_gpu_buffer {
    () => {
        r"(?:CUDA|ROCm|SYCL|Vulkan|Metal|MUSA|CANN|OpenCL)\d*"
    };
}

/// A memory reason beside a platform's SIGKILL report: a kernel or cgroup OOM kill, a memory
/// limit or quota exceeded (Grid Engine's `h_vmem` limit), or Lambda's REPORT line with its
/// peak at the function's size ("Memory Size: 2688 MB\tMax Memory Used: 2581 MB", see
/// [`lambda_at_limit`]). Any of them makes the kill the OOM kill. Not a device's or the
/// process's own allocation failure: that is its own finding, and outranks a SIGKILL by itself.
const MEMORY_REASON: Nearby = Nearby {
    lines: 12,
    by: &[(
        r"(?i)\bMax Memory Used:|\bout of memory: kill|\bmemory cgroup out of memory\b|\boom[-_ ]?kill|\bmemory (?:limit|quota)\b[^\n]{0,40}\bexceeded\b|\bh_vmem\b[^\n]{0,30}\b(?:limit|exceed)",
        KernelOomKill,
    )],
    holds: lambda_at_limit,
};

/// Lambda prints its REPORT line ("Memory Size: 128 MB\tMax Memory Used: 70 MB") after every
/// invocation, successful ones too: it is a memory reason only with the peak within a tenth
/// of the size. Other lines pass.
fn lambda_at_limit(line: &str) -> bool {
    let line = line.to_ascii_lowercase();
    let mb_after = |key: &str| -> Option<u64> {
        let rest = line[line.find(key)? + key.len()..].trim_start();
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    if !line.contains("max memory used:") {
        return true;
    }
    match (mb_after("memory size:"), mb_after("max memory used:")) {
        (Some(size), Some(used)) => used.saturating_mul(10) >= size.saturating_mul(9),
        _ => false,
    }
}

/// The signature table: every family is tested on every line. Order matters only between
/// families of one class matching the same line: the first names the finding, so specific
/// families come before the catch-alls of their class.
pub(crate) const SIGNATURES: &[Signature] = &[
    // ---------------------------------------------------------------- accelerator memory
    // PyTorch caching allocators (c10/cuda/CUDACachingAllocator.cpp and its HIP/XPU/MPS
    // siblings): "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    // "HIP out of memory", "XPU out of memory", "MPS backend out of memory (MPS allocated: ...)".
    sig(
        "pytorch_allocator_oom",
        DeviceOom,
        &[r"(?i)\b(?:cuda|hip|xpu|npu|musa|mps backend)\s+out of memory\b"],
    ),
    // CUDA runtime error strings as PyTorch's C10_CUDA_CHECK, old THC and NCCL print them:
    // "CUDA error: out of memory", "cuda runtime error (2) : out of memory",
    // "NCCL WARN Cuda failure 'out of memory'", "Cuda failure 2 'out of memory'".
    sig(
        "cuda_runtime_oom",
        DeviceOom,
        &[r"(?i)\bcuda(?:\s+runtime)?\s+(?:error|failure)\b[^'\n]{0,30}?'?out of memory\b"],
    ),
    // Enum names of allocation failures in CUDA, cuBLAS/cuDNN/cuFFT/cuSOLVER/cuSPARSE (e.g.
    // "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", Lua Torch's
    // "Error in CuDNN: CUDNN_STATUS_ALLOC_FAILED"), ROCm/HIP, SYCL (XPU), and Caffe's
    // "Check failed: error == cudaSuccess (2 vs. 0)".
    sig(
        "cuda_lib_alloc_failed",
        DeviceOom,
        &[
            r"\b(?:cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory|HSA_STATUS_ERROR_OUT_OF_RESOURCES|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|(?:CU|HIP|MIOPEN|ROC)\w*_ALLOC_FAILED)\b|cudaSuccess \(2 vs\. 0\)",
        ],
    ),
    // cuDNN's "CUDNN_STATUS_NOT_SUPPORTED" is what a cuDNN workspace allocation failure surfaces
    // as; HF accelerate's find_executable_batch_size treats it as OOM. It is also cuDNN's answer
    // to batches beyond its size limits, where a smaller batch is the fix as well.
    // PyTorch's TORCH_WARN (a cuDNN v8 plan that failed and fell back, "UserWarning: Plan failed
    // with a cudnnException: ... CUDNN_STATUS_NOT_SUPPORTED (Triggered internally at ...)") is a
    // warning the job survives, not this failure.
    sig_unless(
        "cudnn_status_not_supported",
        DeviceOom,
        &[r"\bCUDNN_STATUS_NOT_SUPPORTED\b"],
        r"Triggered internally at|UserWarning|Plan failed with a cudnnException",
    ),
    // PyTorch with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync:
    // "Allocation on device 0 would exceed allowed memory. (out of memory)".
    sig(
        "cuda_malloc_async_exceeded",
        DeviceOom,
        &[r"(?i)\bAllocation on device \d+ would exceed allowed memory"],
    ),
    // Serving engines that cannot fit their KV cache at start-up: vLLM "ValueError: No available
    // memory for the cache blocks", "The model's max seq len (8192) is larger than the maximum
    // number of tokens that can be stored in KV cache (2400)", "(X GiB KV cache is needed, which is
    // larger than the available KV cache memory (Y GiB)".
    sig(
        "vllm_kv_cache_oom",
        DeviceOom,
        &[
            r"(?i)No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache|KV cache is needed, which is larger than the available KV cache memory",
        ],
    ),
    // text-generation-inference / LoRAX warm-up "Not enough memory to handle 4096 prefill tokens",
    // SGLang "Not enough memory. Please try to increase --mem-fraction-static".
    sig(
        "serve_warmup_oom",
        DeviceOom,
        &[
            r"(?i)Not enough memory to handle \d+ prefill tokens|Not enough memory\. Please try to increase --mem-fraction-static",
        ],
    ),
    // Chainer's trainer reporting CuPy's memory pool before CuPy 8 (cupy/cuda/memory.pyx):
    // "Exception in main training loop: out of memory to allocate 747110400 bytes (total
    // 5722942464 bytes)", CuPy 7's "Out of memory allocating 255,688,704 bytes (allocated so
    // far: 3,670,475,776 bytes)." The exception class comes last, after a traceback that
    // excerpts cut.
    sig(
        "cupy_pool_oom",
        DeviceOom,
        &[
            r"(?i)\bout of memory to allocate \d+ bytes\b|\bOut of memory allocating [\d,]+ bytes \(allocated so far\b",
        ],
    ),
    // ONNX Runtime's arena (core/framework/bfc_arena.cc): "onnxruntime::BFCArena::
    // AllocateRawInternal Failed to allocate memory for requested buffer of size 285081600".
    // The CUDA execution provider's arena is the GPU's, the CPU one's host RAM; the message
    // says neither, so the provider named around it decides, else the GPU (the arena that
    // runs out in practice).
    Signature {
        nearby: Some(&ORT_PROVIDER),
        ..sig(
            "onnxruntime_arena_oom",
            DeviceOom,
            &[r"\bFailed to allocate memory for requested buffer of size\b"],
        )
    },
    // TensorRT's builder and runtime: "[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::145]
    // Error Code 2: OutOfMemory (Requested size was 3356491776 bytes.)", TensorRT 7's
    // "../rtSafe/WeightsPtr.cpp (92) - OutOfMemory Error in allocate: 0" and "Out of memory
    // error during getBestTactic". A skipped tactic ("Skipping tactic 3 due to insufficient
    // memory") is a warning the build survives.
    sig(
        "tensorrt_out_of_memory",
        DeviceOom,
        &[
            r"\bError Code \d+: (?:OutOfMemory\b|Cuda Runtime \(out of memory\))|\bOutOfMemory Error in \w+|\bOut of memory error during getBestTactic\b",
        ],
    ),
    // llama.cpp / ggml (ggml-cuda.cu, ggml-alloc.c): "ggml_backend_cuda_buffer_type_alloc_buffer:
    // allocating 144.00 MiB on device 4: cudaMalloc failed: out of memory", then
    // "ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968" and
    // "llama_model_load: error loading model: unable to allocate CUDA0 buffer". A CPU buffer
    // ("failed to allocate CPU buffer") is host RAM and not this family.
    sig(
        "ggml_backend_alloc_failed",
        DeviceOom,
        &[concat!(
            r"\bggml_backend_\w+_buffer_type_alloc_buffer: allocating [^\n]{0,80}?failed: out of memory|\b(?:failed|unable) to allocate ",
            ggml_gpu_buffer!(),
            r" buffer\b"
        )],
    ),
    // Vulkan's allocators (issue 42; seen in llama.cpp's ggml_vulkan, Mesa's anv driver and DXVK
    // under Wine): "ggml_vulkan: Device memory allocation of size 118497280 failed.", "vk::Device::
    // allocateMemory: ErrorOutOfDeviceMemory", "MESA: error: ../src/intel/vulkan/anv_device.c:4237:
    // VK_ERROR_OUT_OF_DEVICE_MEMORY", "vkAllocateMemory failed", "DxvkMemoryAllocator: Memory
    // allocation failed". A Vulkan driver's allocation is the card's (or its carve-out's) memory.
    sig(
        "vulkan_device_alloc_failed",
        DeviceOom,
        &[
            r"\bVK_ERROR_OUT_OF_DEVICE_MEMORY\b|\bErrorOutOfDeviceMemory\b|\bvkAllocateMemory failed\b|\bDxvkMemoryAllocator: Memory allocation failed\b|\bggml_vulkan: Device memory allocation of size \d+ failed",
        ],
    ),
    // Level Zero and SYCL through Intel's unified runtime (issue 42; seen in ggml's SYCL backend
    // under stable-diffusion.cpp: "Native API failed. Native API returns: 40
    // (UR_RESULT_ERROR_OUT_OF_RESOURCES)", and llama.cpp's "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY";
    // the older plugin interface's "PI_ERROR_OUT_OF_RESOURCES").
    sig(
        "level_zero_out_of_resources",
        DeviceOom,
        &[
            r"\b(?:UR_RESULT_ERROR_OUT_OF_RESOURCES|ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY|PI_ERROR_OUT_OF_RESOURCES)\b",
        ],
    ),
    // OpenCL's buffer allocation on the device (issue 42; seen in eclambda, KataGo, DeepFaceLab's
    // PlaidML): "[Error] CL_MEM_OBJECT_ALLOCATION_FAILURE".
    sig(
        "opencl_mem_object_allocation_failure",
        DeviceOom,
        &[r"\bCL_MEM_OBJECT_ALLOCATION_FAILURE\b"],
    ),
    // Vendor runtimes that name device memory in their own words (issue 42; seen in Sophgo's
    // bmlib under LLM-TPU and ChatDoc-TPU: "[bmlib_memory][error] bm_alloc_gmem failed, dev_id =
    // 0, size = 0xc0fb4000", sophon-stream's "Alloc Device Memory Failed!", Ascend CANN's
    // "allocate device memory failed.").
    sig(
        "vendor_device_memory_alloc_failed",
        DeviceOom,
        &[
            r"(?i)\bbm_alloc_gmem failed\b|\balloc(?:ate)? device memory failed\b|\bfailed to allocate device memory\b",
        ],
    ),
    // HAMi's vGPU memory limiter refusing an allocation over the container's share (issue 42;
    // seen in Project-HAMi/HAMi issues): "[HAMI-core ERROR (pid:30 thread=... allocator.c:53)]:
    // Device 0 OOM 3171158016 / 3145728000", and its 4paradigm predecessor's "[4pdvGPU ERROR
    // (...)]: device OOM encountered: usage=9502195712 limit=8388608000".
    sig(
        "hami_vgpu_device_oom",
        DeviceOom,
        &[r"\bDevice \d+ OOM \d+ / \d+|\bdevice OOM encountered: usage="],
    ),
    // fairseq / ParlAI catching an OOM: "| WARNING: ran out of memory, skipping batch",
    // "ran out of memory on GPU #2, skipping batch" (whether the job went on is `classify`'s).
    sig(
        "trainer_oom_skipping_batch",
        DeviceOom,
        &[r"(?i)\bran out of memory(?: on GPU #?\d+)?,\s*skipping batch"],
    ),
    // HF accelerate find_executable_batch_size (accelerate/utils/memory.py) after halving the
    // batch on every OOM: "RuntimeError: No executable batch size found, reached zero."
    sig(
        "accelerate_no_batch_size",
        DeviceOom,
        &[r"(?i)\bNo executable batch size found, reached zero"],
    ),
    // NCCL (include/alloc.h): "NCCL WARN Failed to CUDA calloc 6291456 bytes".
    sig(
        "nccl_cuda_alloc_failed",
        DeviceOom,
        &[r"(?i)\bFailed to CUDA (?:calloc|malloc)\b"],
    ),
    // XLA's allocator (also seen hard-wrapped as "Out \nof memory while trying to allocate").
    sig(
        "xla_allocation_oom",
        DeviceOom,
        &[r"(?i)\bOut of memory while trying to allocate\b"],
    ),
    // XLA TPU compiler: "Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm."
    sig(
        "xla_tpu_memory_space",
        DeviceOom,
        &[r"(?i)\bRan out of memory in memory space\b|\bExceeded (?:hbm|vmem) capacity\b"],
    ),
    // TensorFlow: "ResourceExhaustedError: OOM when allocating tensor with shape[...] ... on
    // /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc".
    sig_unless(
        "tf_oom_allocating_tensor",
        DeviceOom,
        &[r"\bOOM when allocating tensor\b"],
        TF_CPU,
    ),
    // TensorFlow BFC allocator: "Allocator (GPU_0_bfc) ran out of memory trying to allocate
    // 18.00MiB". The same sentence followed by "The caller indicates that this is not a
    // failure" is a routine warning on healthy runs.
    sig_unless(
        "tf_bfc_ran_out",
        DeviceOom,
        &[r"(?i)\bran out of memory trying to allocate\b"],
        r"(?i)not a failure|allocator[ (]+cpu\b",
    ),
    // XLA (JAX, PyTorch/XLA, TF): "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while
    // trying to allocate 6291456 bytes.", "RESOURCE_EXHAUSTED: Failed to allocate request for
    // 2.99GiB", and TensorFlow's "ResourceExhaustedError: failed to allocate memory [Op:AddV2]",
    // "(0) Resource exhausted: OOM when allocating tensor ...". gRPC's RESOURCE_EXHAUSTED about
    // message sizes or quotas names no memory and does not match. After the XLA and TensorFlow
    // families above, which name the message inside the status when there is one.
    sig_unless(
        "resource_exhausted",
        DeviceOom,
        &[
            r"(?i)\bresource[ _]?exhausted(?:error)?\b:?[^\n]{0,200}?(?:out of memory|\ballocat|\boom\b|memory|\bhbm\b|\bvmem\b)",
        ],
        TF_CPU,
    ),
    // Exception classes: torch.OutOfMemoryError / torch.cuda.OutOfMemoryError (Jupyter prints
    // the bare class name), cupy.cuda.memory.OutOfMemoryError. Java's and Ray's classes of the
    // same name are about host memory and live in the host section, Julia's `OutOfMemoryError()`
    // is its heap's; a container service's
    // "OutOfMemoryError: Container killed due to memory usage" (AWS ECS and Batch) is a kill
    // from outside, which the general rule reads as one. Triton's "out of resource"
    // is one kernel asking for more shared memory than a multiprocessor has, a compile-time
    // limit and no allocation: TorchInductor's autotuner prints it as "No valid triton configs.
    // OutOfMemoryError: out of resource: triton_mm Required: 294912 Hardware limit:232448",
    // drops that candidate and goes on.
    sig_unless(
        "oom_exception_class",
        DeviceOom,
        &[r"\bOutOfMemoryError\b"],
        r"java\.lang\.OutOfMemoryError|ray\.exceptions\.OutOfMemoryError|OutOfMemoryError: out of resource\b|No valid triton configs|OutOfMemoryError: Container killed\b|OutOfMemoryError\(\)",
    ),
    // Anything else that names a GPU/CUDA source or device next to "out of memory": Caffe2's
    // "event_gpu.cc:17: out of memory", "THCudaCheck FAIL ... error=2 : out of memory",
    // "cudaMalloc failed: out of memory".
    sig_unless(
        "device_out_of_memory_text",
        DeviceOom,
        &[r"(?i)(?:cuda|gpu|\bhip\b|\bdevice\b|thc)\w*[^\n]{0,80}?\bout of memory\b"],
        HINT_VETO,
    ),
    // ---------------------------------------------------------------- host memory
    // PyTorch CPU allocator (c10/core/CPUAllocator.cpp, alloc_cpu.cpp): "DefaultCPUAllocator:
    // can't allocate memory: you tried to allocate 1178729664 bytes. Error code 12", the
    // Windows "not enough memory", and PyTorch 1.1's "posix_memalign(&data, gAlignment,
    // nbytes) == 0. 12 vs 0" (12 = ENOMEM; the line never says "memory").
    sig(
        "pytorch_cpu_allocator_oom",
        HostOom,
        &[
            r"(?i)CPUAllocator[^\n]{0,200}?(?:can't allocate|not enough memory|\b12 vs 0\b)",
            r"\bposix_memalign\b[^\n]{0,80}?\b12 vs 0\b",
        ],
    ),
    // PyTorch 0.x TH allocator: "RuntimeError: $ Torch: not enough memory: you tried to
    // allocate 72GB. Buy new RAM!"
    sig(
        "th_buy_new_ram",
        HostOom,
        &[r"(?i)\bnot enough memory: you tried to allocate\b|\bBuy new RAM\b"],
    ),
    // ENOMEM from the C library: "OSError: [Errno 12] Cannot allocate memory" (os.fork in
    // DataLoader), "fork: Cannot allocate memory". The dynamic loader's "cannot allocate memory
    // in static TLS block" is a library-loading bug, not a shortage.
    sig_unless(
        "errno_enomem",
        HostOom,
        &[r"(?i)\[Errno 12\]|\bcannot allocate memory\b|\bENOMEM\b"],
        r"(?i)static TLS",
    ),
    // numpy (core/_exceptions.py): "numpy.core._exceptions.MemoryError: Unable to allocate 926.
    // GiB for an array with shape (...)", numpy 1.17 "Unable to allocate array with shape".
    sig(
        "numpy_array_memory_error",
        HostOom,
        &[r"(?i)\bUnable to allocate\b[^\n]{0,80}?\barray with shape\b|_ArrayMemoryError\b"],
    ),
    // Python's MemoryError as the exception line of a traceback, bare or with a message, with
    // or without a module path, or as Jupyter's "MemoryError    Traceback (most recent ...)".
    Signature {
        veto: Some(GPU_ALLOCATOR_ERROR),
        ..line_sig(
            "python_memory_error",
            HostOom,
            &[r"^(?:[A-Za-z_][\w.]*\.)?_?(?:Array)?MemoryError\b(?:\s*$|\s*:|\s+Traceback)"],
        )
    },
    // C++ allocation failure: "terminate called after throwing an instance of 'std::bad_alloc'".
    // A GPU library's allocator throws it too, naming its CUDA error (XGBoost's "std::bad_alloc:
    // cudaErrorMemoryAllocation: out of memory", RAPIDS' RMM): that line is the device's, and
    // Thrust's own bad_alloc a line or two above says the same of a bare "std::bad_alloc: out of
    // memory".
    Signature {
        nearby: Some(&THRUST_ABOVE),
        ..sig_unless(
            "cpp_bad_alloc",
            HostOom,
            &[r"\bstd::bad_alloc\b"],
            GPU_ALLOCATOR_ERROR,
        )
    },
    // TensorFlow on the CPU allocator: "OOM when allocating tensor ... device:CPU:0 by allocator
    // cpu [Op:Add]", "Allocator (cpu) ran out of memory".
    sig_unless(
        "tf_cpu_allocator_oom",
        HostOom,
        &[
            r"(?i)(?:\bOOM when allocating tensor\b|\bresource[ _]?exhausted)[^\n]*(?:device:CPU|allocator[ (]+cpu\b)|allocator[ (]+cpu\)? ran out of memory",
        ],
        r"(?i)not a failure",
    ),
    // Ray's memory monitor (raylet node_manager.cc): "2 Workers (tasks / actors) killed due to
    // memory pressure (OOM)", "ray.exceptions.OutOfMemoryError: Task was killed due to the node
    // running low on memory".
    sig(
        "ray_memory_monitor",
        HostOom,
        &[
            r"(?i)\bkilled due to (?:memory pressure|the node running low on memory)|ray\.exceptions\.OutOfMemoryError",
            // ray.memory_monitor.RayOutOfMemoryError (Ray < 1.x); the newer monitor's text
            // without its exception class: "... which exceeds the memory usage threshold of 0.95.
            // Ray killed this worker".
            r"RayOutOfMemoryError|exceeds the memory usage threshold of [\d.]+\. Ray killed this worker|ray-oom-prevention\.html",
        ],
    ),
    // Dask's nanny restarting a worker over its memory budget: "distributed.nanny - WARNING -
    // Worker exceeded 95% memory budget. Restarting", newer "Worker tls://10.0.0.5:1234
    // (pid=129) exceeded 95% memory budget. Restarting...".
    sig(
        "dask_worker_memory_budget",
        HostOom,
        &[r"\bWorker (?:\S+ \(pid=\d+\) )?exceeded \d+% memory budget"],
    ),
    // Windows has no OOM killer: allocation fails when the commit limit is reached, "OSError:
    // [WinError 1455] The paging file is too small for this operation to complete", "(os error
    // 1455)", and in a Chinese locale "页面文件太小，无法完成操作".
    sig(
        "windows_paging_file",
        HostOom,
        &[r"(?i)\b(?:WinError|os error) 1455\b|paging file is too small|页面文件太小"],
    ),
    // JVM-based data tooling (Spark, Hadoop readers): "java.lang.OutOfMemoryError: Java heap
    // space".
    sig("java_heap_oom", HostOom, &[r"java\.lang\.OutOfMemoryError"]),
    // V8 (Node.js) refusing to grow its own heap past its limit (issue 42; seen in gemini-cli,
    // Netlify builds and concurrently-prefixed servers): after "<--- Last few GCs --->", "FATAL
    // ERROR: Ineffective mark-compacts near heap limit Allocation failed - JavaScript heap out of
    // memory", the older "CALL_AND_RETRY_LAST Allocation failed". The runtime's own host-memory
    // error, not a kill from outside (and the GC lines above it are routine).
    sig(
        "v8_javascript_heap_oom",
        HostOom,
        &[r"\bJavaScript heap out of memory\b|\bCALL_AND_RETRY_LAST Allocation failed\b"],
    ),
    // NCCL's shared-memory transport: "failed to extend /dev/shm/nccl-abc to 9637892 bytes",
    // "... /dev/shm/nccl-xyz ... No space left on device". /dev/shm is RAM.
    sig(
        "nccl_shm_full",
        HostOom,
        // NCCL 2.7-2.9 name the segment without its directory: "include/shm.h:28 NCCL WARN Call to
        // posix_fallocate failed : No space left on device", "Error while creating shared memory
        // segment nccl-shm-recv-1462445a6f01cbfc-1-2-3 (size 9637888)".
        &[
            r"(?i)failed to extend /dev/shm/|/dev/shm/\S*[^\n]{0,120}?No space left on device|posix_fallocate failed\s*:\s*No space left on device|Error while creating shared memory segment",
        ],
    ),
    // ---------------------------------------------------------------- DataLoader workers
    // torch/csrc/DataLoader.cpp: "DataLoader worker (pid 1817) is killed by signal: Killed."
    // (SIGKILL, usually the OOM killer) or "...: Bus error. It is possible that dataloader's
    // workers are out of shared memory". Segmentation fault / Terminated / Aborted are not memory.
    sig(
        "dataloader_worker_killed",
        WorkerKilled,
        &[
            r"(?i)\bDataLoader worker \(pid[^)]*\) is killed by signal: (?:Killed|Bus error)",
            // The worker's own SIGBUS handler: "ERROR: Unexpected bus error encountered in
            // worker. This might be caused by insufficient shared memory (shm)."
            r"(?i)\bUnexpected bus error encountered in worker\b",
        ],
    ),
    // Shared-memory tensors passed between workers live in /dev/shm files named torch_*:
    // "RuntimeError: unable to write to file </torch_722_783672312_1>: No space left on device
    // (28)".
    sig(
        "torch_shm_file_full",
        WorkerKilled,
        &[r"(?i)\bunable to write to file\s*<?/torch_|/torch_\w*>?:?\s*No space left on device"],
    ),
    // ---------------------------------------------------------------- kernel OOM killer The
    // kernel's OOM report (mm/oom_kill.c), whose lines come together: "Out of memory: Killed
    // process 1440763 (perl) total-vm:...", "Memory cgroup out of memory: Killed process 15617
    // (python3) ...", pre-4.19 "Memory cgroup out of memory: Kill process 24572 (java) score 0 or
    // sacrifice child".
    sig(
        "kernel_oom_killer",
        KernelOomKill,
        &[
            r"\bKill(?:ed)? process \d+ \(",
            // Kernel >= 4.19 summary line:
            // "oom-kill:constraint=CONSTRAINT_MEMCG,...,task=pt_main_thread,pid=461754,uid=0".
            r"\boom-kill:constraint=",
            // Start of every kernel OOM report: "python3 invoked oom-killer: gfp_mask=0x...".
            r"\binvoked oom-killer\b",
            // Memcg OOM header, and the pre-5.0 "Task in /x killed as a result of limit of /y".
            r"(?i)\bMemory cgroup out of memory\b|\bkilled as a result of limit of\b",
            // "oom_reaper: reaped process 15617 (python3), now anon-rss:0kB".
            r"\boom_reaper: reaped process\b",
        ],
    ),
    // Kubernetes: node-problem-detector's "reason": "OOMKilling" event, a container's
    // "Reason: OOMKilled"; docker inspect's `"OOMKilled": false` says the opposite.
    sig_unless(
        "k8s_oom_killed",
        KernelOomKill,
        // Old kubelets: `"reason": "OOM Killed"`.
        &[r#"\bOOMKill(?:ing|ed)\b|reason"?\s*[:=]\s*"?OOM Killed\b"#],
        r#"(?i)OOMKilled"?\s*[:=]\s*false"#,
    ),
    // The kubelet evicting a pod for memory pressure: "The node was low on resource: memory.
    // Container x was using 35505620Ki, which exceeds its request of 12Gi.", newer "Threshold
    // quantity: 100Mi, available: ...", "The node had condition: [MemoryPressure]".
    sig(
        "k8s_memory_eviction",
        KernelOomKill,
        &[r"low on resource: memory|condition: \[MemoryPressure\]|larger consumption of memory"],
    ),
    // systemd (pid 1) on a unit whose process the kernel OOM-killed: "user.slice: A process of
    // this unit has been killed by the OOM killer."
    sig(
        "systemd_unit_oom_killer",
        KernelOomKill,
        &[r"has been killed by the OOM killer"],
    ),
    // earlyoom, the userspace OOM killer: "low memory! at or below SIGTERM limits", "sending
    // SIGTERM to process 1234 uid 1000 \"python3\": badness 900", "escalating to SIGKILL", and
    // the older "killing process 27541 \"bash\" with signal 15".
    sig(
        "earlyoom_kill",
        KernelOomKill,
        &[
            r#"low memory! at or below SIG(?:TERM|KILL) limits|sending SIG(?:TERM|KILL) to process \d+ (?:uid \d+|"[^"]*": badness)|escalating to SIGKILL|killing process \d+ "[^"]*" with signal \d+"#,
        ],
    ),
    // macOS jetsam, its memory-pressure killer: a JetsamEvent report is `"bug_type": "298"`.
    sig(
        "macos_jetsam_event",
        KernelOomKill,
        &[r#""bug_type"\s*:\s*"298""#],
    ),
    // Hadoop YARN's NodeManager: "Container killed by YARN for exceeding memory limits. 8.2 GB
    // of 8 GB physical memory used."
    sig(
        "yarn_container_memory",
        KernelOomKill,
        &[r"Container killed by YARN for exceeding memory limits"],
    ),
    // IBM Spectrum LSF's job report when its memory limit stopped the job: "TERM_MEMLIMIT: job
    // killed after reaching LSF memory usage limit." then "Exited with exit code 143." (LSF sends
    // SIGTERM first; TERM_RUNLIMIT and TERM_THREADLIMIT are other limits).
    sig("lsf_term_memlimit", KernelOomKill, &[r"\bTERM_MEMLIMIT\b"]),
    // Hosted notebooks that restart a kernel which filled the VM's RAM: Google Colab "Your
    // session crashed after using all available RAM.", Kaggle "Your notebook tried to allocate
    // more memory than is available. It has restarted." (Colab's bare "Your session crashed."
    // says no why.)
    sig(
        "notebook_ram_exhausted",
        KernelOomKill,
        &[
            r"(?i)\bsession crashed after using all available RAM\b|\bnotebook tried to allocate more memory than is available\b",
        ],
    ),
    // systemd-oomd: "systemd-oomd[672]: Killed /user.slice/... due to memory pressure".
    sig(
        "systemd_oomd_kill",
        KernelOomKill,
        // Its other wordings (issue 42; seen in systemd's TEST-55-OOMD journals): "Marked
        // /system.slice/x.service for killing due to memory pressure for ...", and pid 1's
        // "x.service: systemd-oomd killed 1 process(es) in this unit."
        &[
            r"\bsystemd-oomd\[\d+\]: Killed\b|\bMarked \S+ for killing due to memory pressure\b|\bsystemd-oomd killed \d+ process",
        ],
    ),
    // nohang, another userspace OOM killer (issue 42; seen in hakavlad/nohang's journals):
    // "Implement a corrective action:" then "Send SIGKILL to the victim; total response time:
    // 609 ms" (or SIGTERM first), beside "MemAvailable: 113.6 MiB, SwapFree: 182.7 MiB".
    sig(
        "nohang_corrective_kill",
        KernelOomKill,
        &[r"\bSend SIG(?:KILL|TERM) to the victim\b"],
    ),
    // Heroku's dyno manager over a dyno's memory quota (issue 42; seen in bot and web-app
    // threads): "Error R15 (Memory quota vastly exceeded)" then "Stopping process with SIGKILL"
    // and "Process exited with status 137". R14 ("Memory quota exceeded") is only a warning: the
    // dyno swaps and goes on.
    sig(
        "heroku_r15_memory_quota",
        KernelOomKill,
        &[r"\bError R15 \(Memory quota vastly exceeded\)"],
    ),
    // ---------------------------------------------------------------- Slurm
    // task/cgroup plugin: "Detected 2 oom-kill event(s) in step 3756240.batch cgroup." and the
    // >= 22.05 "Detected 1 oom_kill event in StepId=...".
    sig(
        "slurm_cgroup_oom_kill",
        SlurmOom,
        &[
            r"(?i)\bDetected \d+ oom[-_]kill event",
            // Both cgroup-plugin follow-up sentences.
            r"(?i)\bkilled by the cgroup out-of-memory handler\b|\bstep tasks have been OOM Killed\b",
        ],
    ),
    // srun reporting the step: "srun: error: udc-ba26-19: task 0: Out Of Memory".
    sig(
        "srun_task_out_of_memory",
        SlurmOom,
        &[r"\btasks? [\d,\-\[\]]+: Out Of Memory\b"],
    ),
    // jobacct_gather enforcement: "error: Job 848444 exceeded memory limit (33715636 >
    // 32757760), being killed".
    sig(
        "slurm_jobacct_exceeded_limit",
        SlurmOom,
        &[r"(?i)\bexceeded memory limit \(\d+ > \d+\), being killed"],
    ),
    // Job state name in sacct / sstat / email output.
    sig(
        "slurm_out_of_memory_state",
        SlurmOom,
        // sacct's default column width cuts it to "OUT_OF_ME+".
        &[r"\bOUT_OF_MEMORY\b|\bOUT_OF_ME\+"],
    ),
    // "slurmstepd: error: Exceeded job memory limit at some point." -- also printed for jobs
    // that succeed, so it only counts next to a sign that Slurm stopped the job.
    Signature {
        role: Role::SlurmLimitHit,
        ..sig(
            "slurm_memory_limit_hit",
            SlurmOom,
            &[r"(?i)\bExceeded (?:job|step) memory limit\b"],
        )
    },
    // "slurmstepd: error: *** JOB 848444 ON host CANCELLED AT 2018-05-04T17:06:42 ***" (a
    // "DUE TO TIME LIMIT" cancel is something else) and "srun: error: host: task 0: Killed".
    Signature {
        role: Role::SlurmStopped,
        ..sig_unless(
            "slurm_stopped",
            SlurmOom,
            &[
                SLURM_CANCELLED,
                r"srun: error: [^:]+: tasks? [\d,\-\[\]]+: Killed",
            ],
            SLURM_DUE_TO,
        )
    },
    // ---------------------------------------------------------------- SIGKILL, sender unknown
    // A shell's job-status line for a foreground job killed by SIGKILL: bash's bare "Killed",
    // job control "[1]+  Killed   python train.py", zsh "zsh: killed  python train.py",
    // macOS "Killed: 9".
    line_sig("shell_job_killed", KilledBySigkill, &[SHELL_JOB_KILLED]),
    // bash running a script: "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed
    //       python3 main.py ...", and `bash -c '...'` naming itself: "bash: 14837 Killed
    //       python3 -c ...".
    sig(
        "shell_script_job_killed",
        KilledBySigkill,
        &[SHELL_PID_KILLED],
    ),
    // Launchers and IDEs: torch.distributed.elastic "failed (exitcode: -9) local_rank: 5",
    // ChildFailedError "exitcode  : -9", PyCharm "Process finished with exit code 137",
    // docker compose "exited with code 137".
    sig(
        "launcher_exit_minus_9",
        KilledBySigkill,
        // Flyte "terminated with exit code (137)"; docker inspect `"ExitCode": 137`.
        &[
            r#"(?i)\bexit(?:ed)?\s*(?:with\s+)?(?:code|status)\s*[:=]?\s*\(?(?:137|-9)\b|"ExitCode"\s*:\s*137\b"#,
        ],
    ),
    // Python's process pools: torch.multiprocessing.spawn "ProcessExitedException: process 0
    // terminated with signal SIGKILL"; loky/joblib "TerminatedWorkerError: ... The exit codes of
    // the workers are {SIGKILL(-9)}" (not its bare "A worker process managed by the executor was
    // unexpectedly terminated", printed for a segfault or exit 1 as well); concurrent.futures
    // "BrokenProcessPool: A process in the process pool was terminated abruptly" (a typo'd paste
    // says "abruy"); Airflow 3 "Process terminated by signal ... signal=-9
    // signal_name=\"SIGKILL\""; Dask "KilledWorker: ... all those workers died while running it".
    sig(
        "process_pool_worker_killed",
        KilledBySigkill,
        &[
            r#"terminated with signal SIGKILL|SIGKILL\(-9\)|process pool was terminated abru|signal_name="?SIGKILL|\bKilledWorker\b"#,
        ],
    ),
    // DeepSpeed launcher "exits with return code = -9"; subprocess "returned non-zero exit
    // status -9" / "died with <Signals.SIGKILL: 9>"; "interrupted by signal 9: SIGKILL";
    // elastic's "Signal 9 (SIGKILL) received by PID 1234".
    sig(
        "launcher_signal_sigkill",
        KilledBySigkill,
        &[
            r"(?i)\breturn\s*code\s*[:=]?\s*(?:137|-9)\b|\bnon-zero exit status (?:137|-9)\b|<Signals\.SIGKILL: 9>|\bsignal\s*9\W{0,3}SIGKILL\b",
        ],
    ),
    // A platform's or launcher's report that a process died of SIGKILL, whose memory reason may
    // stand beside it (issue 42): Open MPI's "mpirun noticed that process rank 2 with PID 0 on
    // node qy-PC exited on signal 9 (Killed).", AWS Lambda's "Runtime exited with error: signal:
    // killed" under a REPORT line's "Max Memory Used: 2581 MB". Alone it says only SIGKILL; the
    // memory reason nearby (see [`MEMORY_REASON`]) makes it the OOM kill it was.
    Signature {
        nearby: Some(&MEMORY_REASON),
        ..sig(
            "platform_sigkill_report",
            KilledBySigkill,
            &[r"\bexited on signal 9 \(Killed\)|\bRuntime exited with error: signal: killed\b"],
        )
    },
    // gunicorn's arbiter on a worker it SIGKILLed itself after "[CRITICAL] WORKER TIMEOUT
    // (pid:17)" (issue 42; seen in devilry and open-runtimes logs): "[ERROR] Worker (pid:17) was
    // sent SIGKILL! Perhaps out of memory?". The question is the supervisor's guess, not evidence:
    // a SIGKILL, sender known.
    sig(
        "supervisor_sigkill_guess",
        KilledBySigkill,
        &[r"\bwas sent SIGKILL! Perhaps out of memory\?"],
    ),
];

/// slurmstepd's banner for a job or step Slurm cancelled: "slurmstepd: error: *** STEP 12.0 ON
/// n1 CANCELLED AT 2026-11-28T13:46:11 ***" (or "*** JOB 12 ..."). Printed for a person's
/// `scancel`, and also where srun ends the step itself (`--kill-on-bad-exit` after a task
/// failed), so alone it says neither who nor why.
pub(super) const SLURM_CANCELLED: &str = r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT\b";

/// What follows the banner where Slurm ended the job for a reason of its own ("DUE TO TIME
/// LIMIT", "DUE TO PREEMPTION", "DUE TO NODE FAILURE", "DUE TO JOB REQUEUE"): not a person's
/// stop.
pub(super) const SLURM_DUE_TO: &str = r"\bDUE TO\b";

/// srun's line where slurmctld, not srun, ended its step (a `scancel`, a time limit, a lost
/// node): "srun: Job step aborted: Waiting up to 32 seconds for job step to finish." srun does
/// not print it where it ends the step itself (`--kill-on-bad-exit`: "srun: launch/slurm:
/// _step_signal: Terminating StepId=12.0" instead), measured on Slurm 22.05.
pub(super) const SRUN_STEP_ABORTED: &str = r"\bsrun: Job step aborted\b";

/// srun's line where a node of its step was lost: "srun: error: Node failure on n2".
pub(super) const SRUN_NODE_FAILURE: &str = r"\bsrun: error: Node failure on\b";

/// A shell's job-status line for a job killed by SIGKILL, the line alone: bash's "Killed" (or its
/// translation), job control's "\[1\]+  Killed   python train.py", zsh's "zsh: killed  python
/// train.py", macOS's "Killed: 9".
pub(super) const SHELL_JOB_KILLED: &str = concat!(
    r"(?i)^(?:\[\d+\][+-]?\s+)?(?:zsh:\s+)?(?:",
    killed_words!(),
    r")(?::\s*9)?(?:\s{2,}\S.*)?$"
);

/// A shell's report that a job it ran, named by PID, died of SIGKILL: bash's "slurm_script: line
/// 28:  8156 Killed    python3 main.py" or "bash: 14837 Killed    python3 x.py". In another locale
/// the words differ ("bash: 第 1 行：4242 已杀死  sh -c ...", "bash: Zeile 1: 4242 Getötet ...", "bash :
/// ligne 1 : 4242 Processus arrêté ..."): the shell's name, a colon (ASCII or full-width;
/// Portuguese bash writes "bash, linha 1: 4242 Morto"), optionally the translated "line N" and
/// another colon, the PID, then the translated signal name.
pub(super) const SHELL_PID_KILLED: &str = concat!(
    r"^[^\s:：,]{1,120}\s?[:：,]\s*(?:[^:：\n]{0,16}\d+[^:：\d\n]{0,6}[:：]\s*)?\d+\s+(?:",
    killed_words!(),
    r")(?:\s|$)"
);
