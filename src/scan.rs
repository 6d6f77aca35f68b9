//! STUB
pub fn kernel_oom_victim_pid(line: &str) -> Option<u32> {
    let rest = line.split("Killed process ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}
