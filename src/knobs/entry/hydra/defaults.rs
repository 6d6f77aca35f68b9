//! A config's defaults list as Hydra reads it: its entries (`_self_`, `group@package: option`
//! with `optional` and `override`, a plain config path), a group or path resolved against the
//! containing config's directory, the `# @package` header, and the package a config lands at.
//! Which file each entry names, and composing them, is [`super::compose`]'s.

use std::sync::LazyLock;

use regex::Regex;

use super::tree::{Leaf, Node};

/// One entry of a defaults list.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Listed {
    SelfRef,
    /// `- group@package: option` (options several for a list, none for `null`).
    Group {
        group: String,
        package: Option<String>,
        options: Vec<String>,
        optional: bool,
        is_override: bool,
    },
    /// `- path` / `- path@package`: a config that is no group choice.
    Config {
        path: String,
        package: Option<String>,
    },
}

/// The entries of a `defaults:` list; `None` for one that is not a list of such entries.
pub(super) fn defaults(list: &Node) -> Option<Vec<Listed>> {
    let Node::Seq(items) = list else {
        return None;
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Node::Leaf(Leaf {
                text: Some(text), ..
            }) => {
                if text == "_self_" {
                    out.push(Listed::SelfRef);
                } else {
                    let (path, package) = split_package(text);
                    out.push(Listed::Config { path, package });
                }
            }
            Node::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                let mut words: Vec<&str> = key.split_whitespace().collect();
                let group_word = words.pop()?;
                let optional = words.contains(&"optional");
                let is_override = words.contains(&"override");
                let (group, package) = split_package(group_word);
                let options = match value {
                    Node::Leaf(leaf) if leaf.is_null() => Vec::new(),
                    Node::Leaf(Leaf {
                        text: Some(option), ..
                    }) => vec![option.clone()],
                    Node::Seq(items) => items
                        .iter()
                        .map(|i| match i {
                            Node::Leaf(Leaf { text: Some(o), .. }) => Some(o.clone()),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()?,
                    _ => return None,
                };
                out.push(Listed::Group {
                    group,
                    package,
                    options,
                    optional,
                    is_override,
                });
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `group@package` → (`group`, `package`).
fn split_package(text: &str) -> (String, Option<String>) {
    match text.split_once('@') {
        Some((g, p)) => (g.to_string(), Some(p.to_string())),
        None => (text.to_string(), None),
    }
}

/// A group or config path resolved against the containing config's group directory; a
/// leading `/` is absolute.
pub(super) fn resolve_path(base: &str, path: &str) -> String {
    match path.strip_prefix('/') {
        Some(absolute) => absolute.to_string(),
        None if base.is_empty() => path.to_string(),
        None => format!("{base}/{path}"),
    }
}

/// The `# @package X` header: among the `# @key value` lines that open a config file, blank
/// lines between them (`hydra/plugins/config_source.py: _get_header_dict`); any other line,
/// a plain comment included, ends the header.
pub(super) fn package_header(text: &str) -> Option<String> {
    static HEADER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^#\s*@(\S+)\s+(\S+)\s*$").expect("a valid literal regex"));
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let c = HEADER.captures(line)?;
        if &c[1] == "package" {
            return Some(c[2].to_string());
        }
    }
    None
}

/// Where a config lands (`hydra/core/default_element.py: _get_final_package`): the package
/// given in the defaults list, else the file's header (always absolute), else its group path,
/// relative to the containing config's package; whatever follows the last `_global_` is
/// absolute.
pub(super) fn final_package(
    parent: &str,
    explicit: Option<&str>,
    header: Option<&str>,
    group_path: &str,
    relative_group: &str,
) -> String {
    let header = header.filter(|h| *h != "_group_").map(|h| {
        if h.is_empty() || h == "_global_" || h.starts_with("_global_.") {
            if h.is_empty() {
                "_global_".to_string()
            } else {
                h.to_string()
            }
        } else {
            format!("_global_.{h}")
        }
    });
    let package = match explicit {
        Some("_here_") => String::new(),
        Some(p) if p.contains("_group_") => {
            format!(
                "_global_.{}",
                p.replace("_group_", &group_path.replace('/', "."))
            )
        }
        Some(p) => p.to_string(),
        None => header.unwrap_or_else(|| relative_group.replace('/', ".")),
    };
    let joined = match (parent, package.as_str()) {
        ("", p) => p.to_string(),
        (parent, "") => parent.to_string(),
        (parent, p) => format!("{parent}.{p}"),
    };
    match joined.rfind("_global_") {
        Some(i) => joined[i + "_global_".len()..]
            .trim_start_matches('.')
            .to_string(),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_as_hydra_places_them() {
        // (parent, @package in the defaults list, header, group path, relative group, final)
        type Row<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
            &'a str,
            &'a str,
        );
        let table: &[Row] = &[
            ("", None, None, "data", "data", "data"),
            ("", None, Some("_global_"), "data", "data", ""),
            ("", None, Some("_global_.trainer"), "exp", "exp", "trainer"),
            ("", None, Some("foo.bar"), "data", "data", "foo.bar"),
            ("", Some("loader"), None, "data", "data", "loader"),
            ("", Some("_global_"), Some("x"), "data", "data", ""),
            ("model", None, None, "model/enc", "enc", "model.enc"),
            ("model", Some("_here_"), None, "model/enc", "enc", "model"),
            ("model", None, Some("_global_"), "model/enc", "enc", ""),
            ("", None, None, "db/mysql", "db/mysql", "db.mysql"),
        ];
        for (parent, explicit, header, group, relative, want) in table {
            assert_eq!(
                final_package(parent, *explicit, *header, group, relative),
                *want,
                "{parent} {explicit:?} {header:?} {group}"
            );
        }
        assert_eq!(
            package_header("\n# @package _global_\n\nx: 1\n").as_deref(),
            Some("_global_")
        );
        assert_eq!(
            package_header("# comment\n# @package _global_\nx: 1\n"),
            None
        );
        assert_eq!(package_header("x: 1\n# @package _global_\n"), None);
    }
}
