//! Composing the primary config as Hydra would: each config read once from the search path (as
//! the job's user, within bounds on how many and how much), its defaults list followed in order
//! (`_self_` where it stands, groups and their options, nested lists), the command line's group
//! choices and key overrides applied, every value keeping where it was set. It stops, rather
//! than guess, at anything it cannot follow. Picking the batch from the result is
//! [`super::pick`](mod@super::pick)'s.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::as_user;
use super::command_line::{CommandLine, Op};
use super::defaults::{defaults, final_package, package_header, resolve_path, Listed};
use super::tree::{at_package, delete, merge, slot, tree, Leaf, Node, Origin};

/// How deep nested defaults lists are followed: a cycle (`a` lists `b`, `b` lists `a`) stops here.
pub(super) const MAX_DEPTH: usize = 16;

/// The most configs one composition takes in (a file named twice counts twice): real trees
/// compose tens. Defaults lists that each name the next level twice double the count per level
/// ([`MAX_DEPTH`] levels: 65,536), all in root's oomguard before any limit of the job's exists.
pub(super) const MAX_COMPOSED: usize = 1000;

/// The most config text one composition takes in, a file named twice counted twice: it bounds
/// both the work of parsing and the composed tree. Each distinct file is read once (a file
/// named again is taken from memory), so this also bounds what is held. A file of tiny keys
/// (`k1: 1`) costs about seventy times its text while parsed and composed (each key's events,
/// dotted name, value and nodes): 2 MiB, far above real trees (tens of configs of a few KiB),
/// keeps that under about 150 MiB.
pub(super) const MAX_COMPOSED_BYTES: u64 = 2 << 20;

/// A config file composed in.
#[derive(Debug, Clone)]
pub(super) struct Source {
    /// As notes show it: relative to the working directory where it is below it.
    pub(super) shown: PathBuf,
    /// Shared by every composition of the same file: read once ([`Composer::read_once`]).
    pub(super) text: Rc<str>,
    /// `data=mnist` for a group option.
    pub(super) choice: Option<String>,
}

/// Why composition stopped: the job is left as it is.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Stop(pub(super) String);

/// The config whose defaults list is being followed, as its entries need it.
struct Parent<'p> {
    /// Its group's directory: the entries' paths are relative to it.
    base: &'p str,
    /// Where it landed: its entries land relative to it.
    package: &'p str,
    /// How deep in nested defaults lists it is.
    depth: usize,
}

/// Composes the primary config as Hydra would, keeping where each value came from.
pub(super) struct Composer<'a> {
    search: Vec<PathBuf>,
    shown_from: PathBuf,
    line: &'a CommandLine,
    pub(super) sources: Vec<Source>,
    /// Group choices made by `override` entries of the primary defaults list.
    config_overrides: HashMap<String, Vec<String>>,
    /// Each file read so far: a config named again (or through another path or link) is not
    /// read again.
    read: crate::guard::fsutil::ReadOnce,
    /// The text of every config composed so far, one named twice counted twice.
    composed_bytes: u64,
    /// Composition stopped at [`MAX_COMPOSED`] or [`MAX_COMPOSED_BYTES`], not at something it
    /// cannot follow: said in one line.
    pub(super) gave_up: bool,
}

impl<'a> Composer<'a> {
    pub(super) fn new(
        search: Vec<PathBuf>,
        shown_from: PathBuf,
        line: &'a CommandLine,
    ) -> Composer<'a> {
        Composer {
            search,
            shown_from,
            line,
            sources: Vec::new(),
            config_overrides: HashMap::new(),
            read: crate::guard::fsutil::ReadOnce::default(),
            composed_bytes: 0,
            gave_up: false,
        }
    }

    /// The text of the config at `path`, read as the job's user the first time that file is
    /// reached and taken from memory after; each composition of it counts toward the bounds.
    fn read_once(&mut self, path: &Path) -> Result<Rc<str>, io::Error> {
        if self.sources.len() >= MAX_COMPOSED {
            return Err(self.give_up(format!(
                "more than {MAX_COMPOSED} configs composed (its defaults lists name configs again and again)"
            )));
        }
        let left = MAX_COMPOSED_BYTES - self.composed_bytes;
        // No more than the bound allows is ever read: a file past it is not held.
        let cap = left.min(crate::guard::fsutil::SMALL_FILE_MAX_BYTES);
        let text = match as_user(|| self.read.text(path, cap))? {
            crate::guard::fsutil::Once::Again(text) | crate::guard::fsutil::Once::New(text) => text,
            crate::guard::fsutil::Once::TooLong => {
                return Err(self.give_up(format!(
                    "{} would take the config text composed past {}",
                    path.display(),
                    crate::observe::units::human_bytes(MAX_COMPOSED_BYTES)
                )))
            }
        };
        if text.len() as u64 > left {
            return Err(self.give_up(format!(
                "more than {} of config text composed",
                crate::observe::units::human_bytes(MAX_COMPOSED_BYTES)
            )));
        }
        self.composed_bytes += text.len() as u64;
        Ok(text)
    }

    /// Marks the composition as stopped at a bound, with why.
    fn give_up(&mut self, why: String) -> io::Error {
        self.gave_up = true;
        io::Error::other(why)
    }

    /// Whether `group` is a config group: a directory of that name in the search path.
    fn is_group(&self, group: &str) -> bool {
        !group.starts_with("hydra")
            && self
                .search
                .iter()
                .any(|dir| as_user(|| std::fs::metadata(dir.join(group))).is_ok_and(|m| m.is_dir()))
    }

    /// Reads `<dir>/<config>.yaml` from the first search directory that has it; `Ok(None)` when
    /// none has.
    fn load(&mut self, config: &str, choice: Option<String>) -> Result<Option<usize>, Stop> {
        for at in 0..self.search.len() {
            let path = self.search[at].join(format!("{config}.yaml"));
            match self.read_once(&path) {
                Ok(text) => {
                    let shown = path
                        .strip_prefix(&self.shown_from)
                        .map_or_else(|_| path.clone(), Path::to_path_buf);
                    self.sources.push(Source {
                        shown,
                        text,
                        choice,
                    });
                    return Ok(Some(self.sources.len() - 1));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if self.gave_up => return Err(Stop(e.to_string())),
                Err(e) => return Err(Stop(format!("{}: {e}", path.display()))),
            }
        }
        Ok(None)
    }

    /// The composed config, command-line overrides applied.
    pub(super) fn compose_primary(&mut self, name: &str) -> Result<Node, Stop> {
        let primary = self
            .load(name, None)?
            .ok_or_else(|| Stop(format!("no primary config {name}.yaml")))?;
        let mut out = Node::Map(Vec::new());
        self.compose(primary, "", "", true, 0, &mut out)?;
        let line = self.line;
        for o in &line.overrides {
            if o.key.starts_with("hydra.") || o.key == "hydra" || self.is_group(&o.key) {
                continue;
            }
            match (o.op, &o.value) {
                (Op::Delete, _) => delete(&mut out, &o.key),
                (_, Some(value)) => {
                    let leaf = Node::Leaf(Leaf {
                        text: Some(value.clone()),
                        plain: true,
                        from: Origin::Override { index: o.index },
                    });
                    if let Some(node) = slot(&mut out, &o.key, true) {
                        *node = leaf;
                    }
                }
                (_, None) => {}
            }
        }
        Ok(out)
    }

    /// Merges config `file` and what its defaults list names into `out`; `base` is its group's
    /// directory, `package` where it lands.
    fn compose(
        &mut self,
        file: usize,
        base: &str,
        package: &str,
        primary: bool,
        depth: usize,
        out: &mut Node,
    ) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop("defaults lists nest too deep".into()));
        }
        let (own, mut list) = self.own_and_defaults(file)?;
        if primary {
            self.apply_command_line(&mut list);
        }
        let mut slot_self = Some(own);
        if !list.contains(&Listed::SelfRef) {
            list.push(Listed::SelfRef);
        }
        let parent = Parent {
            base,
            package,
            depth,
        };
        for entry in list {
            match entry {
                Listed::SelfRef => {
                    if let Some(own) = slot_self.take() {
                        merge(out, at_package(own, package));
                    }
                }
                Listed::Group {
                    is_override: true, ..
                } => {}
                Listed::Group {
                    group,
                    package: explicit,
                    options,
                    optional,
                    ..
                } => self.compose_group(
                    &parent,
                    &group,
                    explicit.as_deref(),
                    options,
                    optional,
                    out,
                )?,
                Listed::Config {
                    path,
                    package: explicit,
                } => self.compose_config(&parent, &path, explicit.as_deref(), out)?,
            }
        }
        Ok(())
    }

    /// The options `parent`'s defaults list (or an override) chose for `group`, each composed in
    /// turn; a missing option is skipped only where the entry is `optional`. Hydra's own groups
    /// are left to it.
    fn compose_group(
        &mut self,
        parent: &Parent,
        group: &str,
        explicit: Option<&str>,
        options: Vec<String>,
        optional: bool,
        out: &mut Node,
    ) -> Result<(), Stop> {
        let group_path = resolve_path(parent.base, group);
        if group_path.starts_with("hydra/") || group_path == "hydra" {
            return Ok(());
        }
        let options = self
            .config_overrides
            .get(&group_path)
            .cloned()
            .unwrap_or(options);
        for option in options {
            let config = format!("{group_path}/{option}");
            let choice = format!("{group_path}={option}");
            let Some(child) = self.load(&config, Some(choice))? else {
                if optional {
                    continue;
                }
                return Err(Stop(format!("no config {config}.yaml")));
            };
            let relative = group.trim_start_matches('/');
            self.compose_child(child, parent, explicit, &group_path, relative, out)?;
        }
        Ok(())
    }

    /// A config `parent`'s defaults list names by its path (no group choice), composed.
    fn compose_config(
        &mut self,
        parent: &Parent,
        path: &str,
        explicit: Option<&str>,
        out: &mut Node,
    ) -> Result<(), Stop> {
        let config = resolve_path(parent.base, path);
        let child = self
            .load(&config, None)?
            .ok_or_else(|| Stop(format!("no config {config}.yaml")))?;
        let relative = path.trim_start_matches('/');
        let relative_group = relative.rsplit_once('/').map_or("", |(g, _)| g);
        let group_path = config.rsplit_once('/').map_or("", |(g, _)| g);
        self.compose_child(child, parent, explicit, group_path, relative_group, out)
    }

    /// Config `file` as a mapping, its `defaults` list taken out of it and read (none: empty).
    fn own_and_defaults(&self, file: usize) -> Result<(Node, Vec<Listed>), Stop> {
        let shown = self.sources[file].shown.display().to_string();
        let mut own = tree(&self.sources[file].text, file)
            .ok_or_else(|| Stop(format!("{shown} does not parse as YAML")))?;
        let Node::Map(entries) = &mut own else {
            return Err(Stop(format!("{shown} is not a mapping")));
        };
        let list = match entries.iter().position(|(k, _)| k == "defaults") {
            Some(i) => defaults(&entries.remove(i).1)
                .ok_or_else(|| Stop(format!("{shown}: a defaults list oomguard cannot read")))?,
            None => Vec::new(),
        };
        Ok((own, list))
    }

    /// Composes loaded config `child`, which `parent`'s defaults list names, at the package it
    /// lands at ([`final_package`], its own `# @package` header read); `group_path` is its
    /// group's directory, which its own defaults list is relative to.
    fn compose_child(
        &mut self,
        child: usize,
        parent: &Parent,
        explicit: Option<&str>,
        group_path: &str,
        relative_group: &str,
        out: &mut Node,
    ) -> Result<(), Stop> {
        let header = package_header(&self.sources[child].text);
        let child_package = final_package(
            parent.package,
            explicit,
            header.as_deref(),
            group_path,
            relative_group,
        );
        self.compose(
            child,
            group_path,
            &child_package,
            false,
            parent.depth + 1,
            out,
        )
    }

    /// The primary defaults list with the command line's group choices made: `group=option`
    /// changes a choice, `+group=option` appends one, `~group` removes it; `override` entries
    /// of the list apply to groups nested deeper as well.
    fn apply_command_line(&mut self, list: &mut Vec<Listed>) {
        for entry in list.iter() {
            if let Listed::Group {
                group,
                options,
                is_override: true,
                ..
            } = entry
            {
                self.config_overrides
                    .insert(group.trim_start_matches('/').to_string(), options.clone());
            }
        }
        let line = self.line;
        for o in &line.overrides {
            if !self.is_group(&o.key) {
                continue;
            }
            let option = o.value.clone().map(|v| vec![v]);
            match o.op {
                Op::Add => list.push(Listed::Group {
                    group: o.key.clone(),
                    package: None,
                    options: option.unwrap_or_default(),
                    optional: false,
                    is_override: false,
                }),
                Op::Delete => {
                    list.retain(|d| !matches!(d, Listed::Group { group, is_override: false, .. } if group.trim_start_matches('/') == o.key));
                    self.config_overrides.remove(&o.key);
                }
                Op::Set | Op::Force => {
                    self.config_overrides
                        .insert(o.key.clone(), option.unwrap_or_default());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::find_in;
    use crate::knobs::entry::Found;
    use crate::knobs::reader::{KnobError, Request};
    use crate::test_util::argv;

    /// Past the bound on the config text composed: one file larger than it is not read past it,
    /// and a file within it composed again and again (read once, counted each time) stops the
    /// composition too; each is one line naming the bound. Within both, the batch is found.
    #[test]
    fn a_composition_past_its_bounds_is_given_up_with_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("conf");
        std::fs::create_dir_all(conf.join("g")).unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import hydra\n\n@hydra.main(version_base=None, config_path=\"conf\", config_name=\"config\")\ndef main(cfg):\n    pass\n",
        )
        .unwrap();
        let pad = |bytes: usize| format!("pad: \"{}\"\n", "x".repeat(bytes));
        let command = argv("python train.py");
        let compose = |config: String| {
            std::fs::write(conf.join("config.yaml"), config).unwrap();
            find_in(&Request::plain(&command, dir.path()))
        };
        let line = |got: Result<Option<Found>, KnobError>| match got {
            Err(e) => e.to_string(),
            other => panic!("{other:?}"),
        };
        let big = line(compose(format!("batch_size: 32\n{}", pad(5 << 20))));
        assert!(
            big.starts_with("Hydra: gave up composing config: ")
                && big.contains("would take the config text composed past 2.0 MiB")
                && !big.contains('\n'),
            "{big}"
        );
        std::fs::write(conf.join("g/x.yaml"), pad(600 << 10)).unwrap();
        let listing = |n: usize| -> String {
            let entries: String = (0..n).map(|i| format!("  - /g@p{i}: x\n")).collect();
            format!("defaults:\n{entries}  - _self_\nbatch_size: 32\n")
        };
        let again = line(compose(listing(10)));
        assert!(
            again.contains("more than 2.0 MiB of config text composed"),
            "{again}"
        );
        assert!(compose(listing(3)).unwrap().is_some());
    }
}
