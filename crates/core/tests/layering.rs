//! Core's source files import each other in layers, never in a circle
//! (docs/design.md §1, "Layers"): components know nothing of `Fs`, `fs.rs`
//! imports components only, services (`impl Fs` blocks) import both, and
//! nothing below imports a service.
//!
//! This test builds the file-level graph — file A depends on file B when A's
//! code names a path `crate::…` or `super::…` that leads into B (comments
//! and `#[cfg(test)] mod tests` left out) — and fails naming every circle in
//! it, with one loop spelled out, or when a file the design lists as a
//! component reaches `fs.rs`. Paths are read as text, not resolved as
//! rustc would: a name re-exported by `lib.rs` (`crate::Fs`) counts for
//! nothing, a longer path counts for the deepest file it reaches.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// A file's module path ("fs", "migrate/pass"; "migrate" for
/// `migrate/mod.rs`) → the files it depends on.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `root`, by module path, with its text.
fn read_sources(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("read a source directory") {
            let path = e.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Some(rel) = path
                .strip_prefix(root)
                .ok()
                .and_then(|p| p.to_str())
                .and_then(|p| p.strip_suffix(".rs"))
            else {
                continue;
            };
            let rel = rel.replace('\\', "/");
            let name = rel.strip_suffix("/mod").unwrap_or(&rel).to_string();
            let text = std::fs::read_to_string(&path).expect("read a source file");
            out.insert(name, text);
        }
    }
    out
}

/// The code of a file that counts: the text before its `#[cfg(test)] mod
/// tests {`, without `//` comments (doc comments included).
fn code_of(src: &str) -> String {
    let mut end = src.len();
    let mut from = 0;
    while let Some(at) = src[from..].find("#[cfg(test)]") {
        let start = from + at;
        let rest = src[start + "#[cfg(test)]".len()..].trim_start();
        if let Some(rest) = rest.strip_prefix("mod tests") {
            if rest.trim_start().starts_with('{') {
                end = start;
                break;
            }
        }
        from = start + 1;
    }
    src[..end]
        .lines()
        .map(|l| l.find("//").map_or(l, |c| &l[..c]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The deepest file `parts` leads into (its longest prefix that is a file).
fn resolve(parts: &[String], files: &BTreeSet<String>) -> Option<String> {
    (1..=parts.len())
        .rev()
        .map(|k| parts[..k].join("/"))
        .find(|cand| files.contains(cand))
}

/// The files that `name`'s code refers to by `crate::` and `super::` paths
/// (a `{…}` group counts each of its members).
fn deps_of(name: &str, code: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let module: Vec<String> = name.split('/').map(String::from).collect();
    let mut deps = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let word = ["crate", "super"]
            .into_iter()
            .find(|w| code[at..].starts_with(w) && code[at + w.len()..].starts_with("::"));
        let boundary = at == 0 || !is_ident(bytes[at - 1] as char);
        let Some(word) = word.filter(|_| boundary) else {
            at += code[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        };
        // The path's base: the crate root, or the parent of this file's
        // module (`mod.rs` files are their directory's module).
        let mut base: Vec<String> = if word == "crate" {
            Vec::new()
        } else {
            module[..module.len() - 1].to_vec()
        };
        let mut parts: Vec<String> = Vec::new();
        let mut i = at + word.len();
        while code[i..].starts_with("::") {
            i += 2;
            let rest = &code[i..];
            if rest.starts_with('{') {
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                for member in group.split(',') {
                    let mut p = base.clone();
                    p.extend(parts.iter().cloned());
                    p.extend(member.split("::").map(|s| s.trim().to_string()));
                    deps.extend(resolve(&p, files));
                }
                break;
            }
            let len = rest
                .find(|c: char| !is_ident(c) && c != '*')
                .unwrap_or(rest.len());
            if len == 0 {
                break;
            }
            let seg = &rest[..len];
            i += len;
            if seg == "super" && parts.is_empty() {
                base.pop();
            } else if seg != "*" && seg != "self" {
                parts.push(seg.to_string());
            }
        }
        let mut p = base;
        p.extend(parts);
        deps.extend(resolve(&p, files));
        at = i.max(at + 1);
    }
    deps.remove(name);
    deps.remove("lib");
    deps
}

/// The file-level graph of `sources` (`lib.rs` left out: it only declares
/// the modules and re-exports).
fn graph(sources: &BTreeMap<String, String>) -> Graph {
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .filter(|(name, _)| name.as_str() != "lib")
        .map(|(name, src)| (name.clone(), deps_of(name, &code_of(src), &files)))
        .collect()
}

/// The files `from` reaches (itself only through a loop).
fn reach(g: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = vec![from];
    while let Some(v) = todo.pop() {
        for w in g.get(v).into_iter().flatten() {
            if seen.insert(w.clone()) {
                todo.push(w);
            }
        }
    }
    seen
}

/// The circles: sets of two or more files that all reach each other.
fn circles(g: &Graph) -> Vec<BTreeSet<String>> {
    let reached: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|v| (v, reach(g, v))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (v, r) in &reached {
        if !r.contains(*v) || out.iter().any(|c| c.contains(*v)) {
            continue;
        }
        let circle: BTreeSet<String> = r
            .iter()
            .filter(|w| reached.get(w).is_some_and(|rw| rw.contains(*v)))
            .cloned()
            .collect();
        out.push(circle);
    }
    out
}

/// The shortest loop from the circle's first file back to it, as text.
fn one_loop(g: &Graph, circle: &BTreeSet<String>) -> String {
    let start = circle.first().expect("a circle has files");
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut todo = VecDeque::from([start]);
    while let Some(v) = todo.pop_front() {
        for w in g[v].iter().filter(|w| circle.contains(*w)) {
            if w == start {
                let mut path = vec![start.as_str(), v.as_str()];
                let mut at = v;
                while let Some(p) = prev.get(at) {
                    path.push(p.as_str());
                    at = p;
                }
                path.reverse();
                return path.join(" -> ");
            }
            if !prev.contains_key(w) {
                prev.insert(w, v);
                todo.push_back(w);
            }
        }
    }
    unreachable!("every file of a circle reaches the first")
}

/// What a failure says: each circle's files with their edges inside it.
fn describe(g: &Graph, circles: &[BTreeSet<String>]) -> String {
    let mut s = String::new();
    for c in circles {
        s += &format!("{} files in a circle ({}):\n", c.len(), one_loop(g, c));
        for v in c {
            let inside: Vec<&String> = g[v].iter().filter(|w| c.contains(*w)).collect();
            s += &format!("  {v} -> {inside:?}\n");
        }
    }
    s
}

#[test]
fn core_source_files_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&read_sources(&src));
    // A wrong directory or a parser that sees nothing must not pass.
    assert!(
        g.len() > 30,
        "only {} source files found in {src:?}",
        g.len()
    );
    assert!(
        g["fs"].contains("cache") && g["ops_file"].contains("fs"),
        "the graph misses known imports: {:?}",
        g["fs"]
    );
    let found = circles(&g);
    assert!(
        found.is_empty(),
        "core's files import each other in a circle (docs/design.md §1, \
         \"Layers\": fs.rs and components never import services):\n{}",
        describe(&g, &found)
    );
}

/// The components of docs/design.md §1.1: files that know nothing of `Fs`.
const COMPONENTS: &[&str] = &[
    "alloc",
    "cache",
    "counters",
    "dir_index",
    "extent_map",
    "extent_space",
    "inode",
    "journal",
    "lock_order",
    "log",
    "log_space",
    "migrate/state",
    "mkfs",
    "placement_stats",
    "pointer_repair",
    "read_pins",
    "recovery",
    "recovery_problems",
    "service_state",
    "shared",
    "sums",
    "tier",
    "types",
    "worker",
];

#[test]
fn the_components_the_design_lists_never_reach_fs() {
    let g = graph(&read_sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    ));
    for c in COMPONENTS {
        assert!(g.contains_key(*c), "no file {c}.rs: update design.md §1.1");
        assert!(
            !reach(&g, c).contains("fs"),
            "{c}.rs, a component (design.md §1.1), reaches fs.rs: {:?}",
            g[*c]
        );
    }
}

fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_pair_of_files_naming_each_other_is_a_circle() {
    let g = graph(&sources(&[
        ("lib", "pub mod a; pub mod b;"),
        ("a", "use crate::b::Thing;\npub struct Other;"),
        ("b", "pub struct Thing(crate::a::Other);"),
    ]));
    let found = circles(&g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], BTreeSet::from(["a".into(), "b".into()]));
    assert!(describe(&g, &found).contains("a -> b -> a"));
}

#[test]
fn comments_test_modules_and_lib_reexports_are_no_edges() {
    let g = graph(&sources(&[
        ("lib", "pub use a::Other;"),
        (
            "a",
            "/// See [`crate::b::Thing`].\npub struct Other; // crate::b\n\
             #[cfg(test)]\nmod tests {\n    use crate::b::Thing;\n}\n",
        ),
        ("b", "pub struct Thing(crate::Other, crate::a::Other);"),
    ]));
    assert!(g["a"].is_empty(), "{g:?}");
    assert!(circles(&g).is_empty());
}

#[test]
fn super_paths_groups_and_globs_are_edges() {
    let g = graph(&sources(&[
        ("m", "mod x; mod y; use crate::{c::C, d};"),
        ("m/x", "use super::*;\nuse super::y::{self, Y};"),
        ("m/y", "use super::super::c::{C, D};"),
        ("c", "pub struct C;"),
        ("d", "use crate::m::x::X;"),
    ]));
    assert_eq!(g["m"], BTreeSet::from(["c".into(), "d".into()]));
    assert_eq!(g["m/x"], BTreeSet::from(["m".into(), "m/y".into()]));
    assert_eq!(g["m/y"], BTreeSet::from(["c".into()]));
    let found = circles(&g);
    assert_eq!(
        found,
        vec![BTreeSet::from(["d".into(), "m".into(), "m/x".into()])]
    );
}
