//! The config tree Hydra's composition works on: a YAML document parsed into mappings (in file
//! order), lists and scalars that remember which file and key (or which override) set them, and
//! the operations composition needs (OmegaConf's merge, placing a tree at a package, a dotted
//! key's node, deleting one, listing every scalar). It knows nothing of defaults lists or of
//! which files to read: that is [`super::defaults`]'s and [`super::compose`]'s.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle};

/// A config tree: mappings in file order, lists, and scalars that remember where they came from.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
    Leaf(Leaf),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Leaf {
    /// The scalar's text; `None` for an alias.
    pub(super) text: Option<String>,
    pub(super) plain: bool,
    pub(super) from: Origin,
}

/// Where a value of the composed config was set.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Origin {
    /// Key `key` of composed file `file`.
    File { file: usize, key: String },
    /// The override at argv index `index`.
    Override { index: usize },
}

impl Leaf {
    pub(super) fn is_null(&self) -> bool {
        self.plain
            && matches!(
                self.text.as_deref(),
                Some("" | "~" | "null" | "Null" | "NULL")
            )
    }
}

/// The first document of `text` as a tree whose leaves name `file`; `None` if it does not parse.
pub(super) fn tree(text: &str, file: usize) -> Option<Node> {
    let mut events = Vec::new();
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, _) = next.ok()?;
        let end = matches!(event, Event::DocumentEnd);
        events.push(event);
        if end {
            break;
        }
    }
    let start = events
        .iter()
        .position(|e| matches!(e, Event::DocumentStart(_)))?;
    let mut at = start + 1;
    match events.get(at) {
        None | Some(Event::DocumentEnd | Event::StreamEnd) => Some(Node::Map(Vec::new())),
        Some(_) => build(&events, &mut at, file, ""),
    }
}

/// The node starting at `events[*at]`, leaving `*at` after it.
fn build(events: &[Event], at: &mut usize, file: usize, key: &str) -> Option<Node> {
    let event = events.get(*at)?;
    *at += 1;
    match event {
        Event::Scalar(value, style, ..) => Some(Node::Leaf(Leaf {
            text: Some(value.to_string()),
            plain: *style == ScalarStyle::Plain,
            from: Origin::File {
                file,
                key: key.to_string(),
            },
        })),
        Event::Alias(_) => Some(Node::Leaf(Leaf {
            text: None,
            plain: false,
            from: Origin::File {
                file,
                key: key.to_string(),
            },
        })),
        Event::SequenceStart(..) => {
            let mut items = Vec::new();
            while !matches!(events.get(*at)?, Event::SequenceEnd) {
                items.push(build(events, at, file, key)?);
            }
            *at += 1;
            Some(Node::Seq(items))
        }
        Event::MappingStart(..) => {
            let mut entries: Vec<(String, Node)> = Vec::new();
            // Where each key is in `entries`: a mapping of many keys is built in linear time.
            let mut index: HashMap<String, usize> = HashMap::new();
            while !matches!(events.get(*at)?, Event::MappingEnd) {
                let name = match events.get(*at)? {
                    Event::Scalar(name, ..) => Some(name.to_string()),
                    _ => None,
                };
                let child_key = match (&name, key) {
                    (Some(n), "") => n.clone(),
                    (Some(n), k) => format!("{k}.{n}"),
                    (None, _) => String::new(),
                };
                build(events, at, file, "")?;
                let value = build(events, at, file, &child_key)?;
                // A key that is not a scalar (`? [a, b]`) or `<<` is not a config key.
                if let Some(name) = name.filter(|n| n != "<<") {
                    match index.get(&name) {
                        Some(&i) => entries[i].1 = value,
                        None => {
                            index.insert(name.clone(), entries.len());
                            entries.push((name, value));
                        }
                    }
                }
            }
            *at += 1;
            Some(Node::Map(entries))
        }
        _ => None,
    }
}

/// Up to this many keys of a mapping are merged by looking each up in turn.
const MERGE_SCAN_MAX: usize = 16;

/// `src` merged into `dst` as OmegaConf merges configs: mappings key by key, anything else
/// replaced.
pub(super) fn merge(dst: &mut Node, src: Node) {
    match (dst, src) {
        // A few keys are looked for one by one; many through an index of `dst`'s, so that
        // merging a mapping of many keys takes linear time, not quadratic.
        (Node::Map(d), Node::Map(s)) if s.len() <= MERGE_SCAN_MAX => {
            for (key, value) in s {
                match d.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => merge(&mut slot.1, value),
                    None => d.push((key, value)),
                }
            }
        }
        (Node::Map(d), Node::Map(s)) => {
            let mut index: HashMap<String, usize> = d
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.clone(), i))
                .collect();
            for (key, value) in s {
                match index.get(&key) {
                    Some(&i) => merge(&mut d[i].1, value),
                    None => {
                        index.insert(key.clone(), d.len());
                        d.push((key, value));
                    }
                }
            }
        }
        (dst, src) => *dst = src,
    }
}

/// `node` placed at the dotted `package` (`data` → `{data: node}`).
pub(super) fn at_package(node: Node, package: &str) -> Node {
    package
        .split('.')
        .filter(|s| !s.is_empty())
        .rev()
        .fold(node, |node, segment| {
            Node::Map(vec![(segment.to_string(), node)])
        })
}

/// The node at a dotted key; with `create`, missing mappings on the way are made.
pub(super) fn slot<'a>(root: &'a mut Node, key: &str, create: bool) -> Option<&'a mut Node> {
    let mut node = root;
    for segment in key.split('.') {
        let Node::Map(entries) = node else {
            return None;
        };
        let i = match entries.iter().position(|(k, _)| k == segment) {
            Some(i) => i,
            None if create => {
                entries.push((segment.to_string(), Node::Map(Vec::new())));
                entries.len() - 1
            }
            None => return None,
        };
        node = &mut entries[i].1;
    }
    Some(node)
}

/// Removes the dotted key.
pub(super) fn delete(root: &mut Node, key: &str) {
    let (parent, last) = match key.rsplit_once('.') {
        Some((parent, last)) => (slot(root, parent, false), last),
        None => (Some(root), key),
    };
    if let Some(Node::Map(entries)) = parent {
        entries.retain(|(k, _)| k != last);
    }
}

/// Every scalar of the tree with its dotted key, in order.
pub(super) fn leaves<'a>(node: &'a Node, prefix: &str, out: &mut Vec<(String, &'a Leaf)>) {
    match node {
        Node::Map(entries) => {
            for (k, v) in entries {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &key, out);
            }
        }
        Node::Leaf(leaf) => out.push((prefix.to_string(), leaf)),
        Node::Seq(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping of many keys (merged through an index) merges as one of a few (merged key by
    /// key): a later value wins in place, a new key goes last, mappings merge deep; a key
    /// written twice in one file keeps its last value.
    #[test]
    fn many_keys_merge_as_a_few_do() {
        let values = |node: &Node| {
            let mut out = Vec::new();
            leaves(node, "", &mut out);
            out.into_iter()
                .map(|(key, leaf)| (key, leaf.text.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        let keys = |from: u32, to: u32, value: &str| -> String {
            (from..to).map(|i| format!("k{i}: {value}\n")).collect()
        };
        for n in [4u32, 40] {
            let mut dst = tree(&format!("{}m:\n  a: 1\n  b: 1\n", keys(0, n, "old")), 0).unwrap();
            let src = tree(
                &format!("m:\n  b: 2\n  c: 2\n{}", keys(n / 2, n + n / 2, "new")),
                1,
            );
            merge(&mut dst, src.unwrap());
            let want: Vec<(String, String)> = (0..n)
                .map(|i| (format!("k{i}"), if i < n / 2 { "old" } else { "new" }))
                .chain([
                    ("m.a".into(), "1"),
                    ("m.b".into(), "2"),
                    ("m.c".into(), "2"),
                ])
                .chain((n..n + n / 2).map(|i| (format!("k{i}"), "new")))
                .map(|(k, v)| (k, v.to_string()))
                .collect();
            assert_eq!(values(&dst), want, "{n} keys");
        }
        let twice = tree(&format!("{}k1: again\n", keys(0, 40, "once")), 0).unwrap();
        let got = values(&twice);
        assert_eq!(got.len(), 40);
        assert_eq!(got[1], ("k1".to_string(), "again".to_string()));
    }
}
