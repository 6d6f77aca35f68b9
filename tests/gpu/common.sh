# Shared by the real-GPU checks (check.sh, hf_trainer.sh, shared_gpu.sh): sourced, never run. The caller sets
# `name` (its file name, for messages) first. Defines say and cannot_run, checks what every GPU
# check needs (exit 2 where it cannot run), and gives `bin` (an absolute oomguard: OOMGUARD_BIN,
# or a release build) and `tmp` (a temporary directory removed on exit unless keep=1).

say() { printf '%s: %s\n' "$name" "$*" >&2; }
cannot_run() {
    say "cannot run here: $*"
    exit 2
}

command -v nvidia-smi >/dev/null 2>&1 ||
    cannot_run "nvidia-smi not found: this check needs an NVIDIA GPU and its driver"
nvidia-smi -L >/dev/null 2>&1 ||
    cannot_run "nvidia-smi fails: $(nvidia-smi -L 2>&1 | head -n 1)"
command -v python3 >/dev/null 2>&1 || cannot_run "python3 not found"
python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 ||
    cannot_run "python3 cannot use CUDA through torch (python3 -c 'import torch; assert torch.cuda.is_available()' fails)"
if [ -n "${OOMGUARD_BIN:-}" ]; then
    [ -x "$OOMGUARD_BIN" ] || cannot_run "OOMGUARD_BIN=$OOMGUARD_BIN is not an executable file"
else
    command -v cargo >/dev/null 2>&1 || cannot_run "cargo not found (or set OOMGUARD_BIN to a built oomguard)"
fi

say "GPUs:"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader >&2

# Build, unless a binary was given.
gpu_build() {
    if [ -n "${OOMGUARD_BIN:-}" ]; then
        bin=$(realpath "$OOMGUARD_BIN") || exit 2
        say "using $bin ($("$bin" --version))"
    else
        cargo build --release || { say "FAIL: cargo build --release failed"; exit 1; }
        bin=$PWD/target/release/oomguard
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/oomguard-$name.XXXXXX") || exit 2
    cleanup() { [ "${keep:-0}" = 1 ] || rm -rf "$tmp"; }
    trap cleanup EXIT
}

# Warns when GPU 0 already has more than a tenth of its memory in use; $1 says what that risks.
gpu_busy_warning() {
    local busy
    busy=$(nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0 |
        awk -F', *' '{ if ($1 > $2 / 10) print $1 " MiB of " $2 " MiB" }')
    [ -z "$busy" ] || say "warning: GPU 0 already has $busy in use; $1"
}

# Ends the check on its verdict ($1, 0 for no problem): PASS, or FAIL with the temporary
# directory kept for a look.
gpu_finish() {
    if [ "$1" = 0 ]; then
        say "PASS"
        exit 0
    fi
    keep=1
    say "FAIL (files kept in $tmp)"
    exit 1
}
