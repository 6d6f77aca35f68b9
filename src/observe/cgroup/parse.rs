//! Parsers for the text of cgroup files that both versions share: /proc/self/cgroup, controller
//! lists, single counters, limits (v2's `max` and v1's huge "no limit" value alike),
//! `memory.stat` and `cgroup.procs`. They work on strings, so tests feed them samples.
//!
//! Parsers of one version's files only live with that version (`v1`, `v2`); reading files and
//! deciding what a value means is left to the callers.

/// What /proc/self/cgroup says about memory. See cgroups(7): one `ID:CONTROLLERS:PATH` line
/// per hierarchy, e.g. (v1 with a hybrid unified mount)
/// ```text
/// 9:name=systemd:/
/// 4:memory:/process_api/af2ae7
/// 1:cpu,cpuacct:/
/// 0::/
/// ```
/// or on a pure v2 system just `0::/user.slice/user-1000.slice/session-2.scope`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCgroup<'a> {
    /// The v1 hierarchy with `memory` in its controller list: (that list as written, e.g.
    /// `"memory"` or `"cpu,memory"`; the cgroup path).
    pub v1_memory: Option<(&'a str, &'a str)>,
    /// The path of the v2 (`0::`) line.
    pub unified: Option<&'a str>,
}

/// Parses /proc/self/cgroup (see [`ProcCgroup`] for a sample). Paths may contain `:`.
pub fn parse_proc_cgroup(text: &str) -> ProcCgroup<'_> {
    let mut out = ProcCgroup::default();
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.unified = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            out.v1_memory = Some((controllers, path));
        }
    }
    out
}

/// Whether a space-separated controller list (`cgroup.controllers`, `cgroup.subtree_control`),
/// e.g. `"cpuset cpu io memory hugetlb pids rdma misc\n"`, names `controller`.
pub fn lists_controller(text: &str, controller: &str) -> bool {
    text.split_whitespace().any(|c| c == controller)
}

/// Parses a counter file holding one number, e.g. `memory.current` / `memory.usage_in_bytes`:
/// `"52428800\n"`.
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// cgroup v1 shows "no limit" as the largest page-aligned `i64`: 9223372036854771712 with 4 KiB
/// pages, 9223372036854710272 with 64 KiB pages. Anything from 4 EiB up is "no limit".
pub(super) const UNLIMITED_FLOOR: u64 = 1 << 62;

/// Parses a limit: v2 `memory.max` (`"max\n"` or `"67108864\n"`), v1 `memory.limit_in_bytes`
/// (`"9223372036854771712\n"` when unlimited). `None` for no limit (or unparsable).
pub fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    parse_u64(text).filter(|&value| value < UNLIMITED_FLOOR)
}

/// The value of `key` in a flat-keyed file (`key value` per line).
pub(super) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// `memory.stat` holds one `key value` a line, e.g. `inactive_file 16384`. v1 (kernel 6.x, abridged) lists
/// this cgroup's own counters, then `total_*` ones that include the cgroups below it:
/// ```text
/// cache 643072
/// rss 1638400
/// inactive_anon 1499136
/// active_anon 12288
/// inactive_file 16384
/// active_file 626688
/// hierarchical_memory_limit 9223372036854771712
/// total_cache 643072
/// total_inactive_file 16384
/// total_active_file 626688
/// ```
/// v2 (always hierarchical) has no `total_*`:
/// ```text
/// anon 1466368
/// file 643072
/// kernel 1142784
/// shmem 0
/// file_dirty 28672
/// inactive_anon 1499136
/// active_anon 12288
/// inactive_file 16384
/// active_file 626688
/// unevictable 0
/// ```
/// Keys match whole: `inactive_file` never reads `total_inactive_file`.
///
/// The values of several `memory.stat` `keys` from one pass over the text (the sampler reads
/// the file once a tick and wants five of its ~40 lines); `None` for a key not present. An
/// empty key matches nothing.
pub fn parse_memory_stat_fields<const N: usize>(text: &str, keys: [&str; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    let mut left = keys.iter().filter(|k| !k.is_empty()).count();
    for line in text.lines() {
        if left == 0 {
            break;
        }
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|k| *k == key) {
            if out[i].is_none() {
                out[i] = value.trim().parse().ok();
                left -= 1;
            }
        }
    }
    out
}

/// Parses `cgroup.procs`: one PID per line, e.g. `"4242\n4243\n"`. PID 0 is never valid there.
pub fn parse_pids(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|&pid| pid != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::cgroup::testkit::*;

    #[test]
    fn parses_proc_cgroup() {
        let v1 = "9:name=systemd:/\n4:memory:/process_api/af2ae7\n1:cpu,cpuacct:/\n0::/\n";
        let table = [
            (
                v1,
                ProcCgroup {
                    v1_memory: Some(("memory", "/process_api/af2ae7")),
                    unified: Some("/"),
                },
            ),
            (
                "0::/user.slice/user-1000.slice/session-2.scope\n",
                ProcCgroup {
                    v1_memory: None,
                    unified: Some("/user.slice/user-1000.slice/session-2.scope"),
                },
            ),
            (
                "4:cpu,memory:/x\n",
                ProcCgroup {
                    v1_memory: Some(("cpu,memory", "/x")),
                    unified: None,
                },
            ),
            (
                "0::/a:b\n",
                ProcCgroup {
                    v1_memory: None,
                    unified: Some("/a:b"),
                },
            ),
            // `memory` only as a whole controller name, never a prefix or a named hierarchy.
            ("5:memoryx:/y\n3:name=memory:/z\n", ProcCgroup::default()),
            ("", ProcCgroup::default()),
            ("garbage\n", ProcCgroup::default()),
        ];
        for (text, want) in table {
            assert_eq!(parse_proc_cgroup(text), want, "{text:?}");
        }
    }

    #[test]
    fn parses_controller_lists() {
        let table = [
            ("cpuset cpu io memory hugetlb pids rdma misc\n", true),
            ("memory\n", true),
            ("cpu pids\n", false),
            ("", false),
            ("memoryx\n", false),
        ];
        for (text, want) in table {
            assert_eq!(lists_controller(text, "memory"), want, "{text:?}");
        }
    }

    #[test]
    fn parses_sizes() {
        let table = [
            ("max\n", None),
            ("67108864\n", Some(64 * MIB)),
            ("0\n", Some(0)),
            ("9223372036854771712\n", None), // v1 unlimited, 4 KiB pages
            ("9223372036854710272\n", None), // v1 unlimited, 64 KiB pages
            ("", None),
            ("lots\n", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_limit(text), want, "{text:?}");
        }
        assert_eq!(parse_u64("52428800\n"), Some(52428800));
        assert_eq!(
            parse_u64("9223372036854771712\n"),
            Some(9223372036854771712)
        );
        assert_eq!(parse_u64("max\n"), None);
    }

    #[test]
    fn parses_memory_stat_fields() {
        let table = [
            (V1_MEMORY_STAT, "inactive_file", Some(16384)),
            (V1_MEMORY_STAT, "total_inactive_file", Some(81920)),
            (
                V1_MEMORY_STAT,
                "hierarchical_memory_limit",
                Some(9223372036854771712),
            ),
            (V2_MEMORY_STAT, "inactive_file", Some(16384)),
            (V2_MEMORY_STAT, "total_inactive_file", None), // v2 has no total_*
            (V2_MEMORY_STAT, "file", Some(643072)),        // whole keys: not file_mapped
            (V2_MEMORY_STAT, "file_dirty", Some(28672)),
            (V2_MEMORY_STAT, "inactive", None),
            ("inactive_file lots\n", "inactive_file", None),
            ("", "inactive_file", None),
        ];
        for (text, key, want) in table {
            assert_eq!(parse_memory_stat_fields(text, [key])[0], want, "{key}");
        }
    }

    #[test]
    fn parses_many_memory_stat_fields_in_one_pass() {
        let v1 = parse_memory_stat_fields(
            V1_MEMORY_STAT,
            [
                "total_inactive_file",
                "total_cache",
                "inactive_file",
                "absent",
                "",
            ],
        );
        assert_eq!(v1, [Some(81920), Some(708608), Some(16384), None, None]);
        let v2 = parse_memory_stat_fields(V2_MEMORY_STAT, ["anon", "file", "shmem", ""]);
        assert_eq!(v2, [Some(1466368), Some(643072), Some(0), None]);
        assert_eq!(parse_memory_stat_fields("", ["anon"]), [None]);
        assert_eq!(parse_memory_stat_fields("anon x\n", ["anon"]), [None]);
    }

    #[test]
    fn parses_pids() {
        let table: [(&str, &[u32]); 4] = [
            ("4242\n4243\n", &[4242, 4243]),
            ("", &[]),
            ("0\n17\n", &[17]),
            ("x\n-3\n9\n", &[9]),
        ];
        for (text, want) in table {
            assert_eq!(parse_pids(text), want, "{text:?}");
        }
    }
}
