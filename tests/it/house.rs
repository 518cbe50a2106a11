//! The house as ARCHITECTURE.md draws it, held to the code: the import table against the
//! crates' manifests, the module list against each crate's `src/`, and no import circle
//! between the modules of a crate. A document that only states a rule drifts; this fails
//! the build's tests when the code and the page part.

use crate::harness::repo;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn architecture() -> String {
    std::fs::read_to_string(repo("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The lines of the first fenced block after `heading`.
fn block_after<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let from = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    doc[from..]
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect()
}

/// Every workspace member: package name → its manifest, parsed.
fn members() -> BTreeMap<String, toml::Table> {
    let root: toml::Table = std::fs::read_to_string(repo("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let list = root["workspace"]["members"].as_array().unwrap();
    list.iter()
        .map(|m| {
            let dir = repo(m.as_str().unwrap());
            let manifest: toml::Table = std::fs::read_to_string(dir.join("Cargo.toml"))
                .unwrap()
                .parse()
                .unwrap();
            let name = manifest["package"]["name"].as_str().unwrap().to_string();
            (name, manifest)
        })
        .collect()
}

/// The table under "Who imports whom": crate → the workspace crates it may import.
fn import_table(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let from = doc
        .find("## Who imports whom")
        .expect("the import table's section");
    let ticked = |cell: &str| -> BTreeSet<String> {
        cell.split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty())
            .collect()
    };
    doc[from..]
        .lines()
        .skip_while(|l| !l.starts_with("| crate"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
            let name = cells[0].trim().trim_matches('`').to_string();
            (name, ticked(cells.get(1).copied().unwrap_or("")))
        })
        .collect()
}

#[test]
fn the_import_table_is_the_crates_manifests() {
    let members = members();
    let table = import_table(&architecture());
    let names: BTreeSet<String> = members.keys().cloned().collect();
    assert_eq!(
        table.keys().cloned().collect::<BTreeSet<_>>(),
        names,
        "ARCHITECTURE.md's import table names every workspace crate, and no other"
    );
    for (name, manifest) in &members {
        let deps: BTreeSet<String> = manifest
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| d.keys().filter(|k| names.contains(*k)).cloned().collect())
            .unwrap_or_default();
        assert_eq!(
            deps, table[name],
            "{name}: its manifest's workspace dependencies against ARCHITECTURE.md's row"
        );
    }
    // The layers the table must keep, whatever else it says.
    let modes = ["pilotd-volunteer", "pilotd-kubernetes"];
    for mode in modes {
        assert!(
            !table["pilotd-core"].contains(mode),
            "the core names no mode"
        );
        for other in modes {
            assert!(!table[mode].contains(other), "{mode} imports {other}");
        }
        assert!(!table[mode].contains("pilotd"), "{mode} imports the binary");
    }
}

/// The crates whose `src/` the house lists module by module: the header line in the block,
/// and the directory.
const LISTED: [&str; 4] = [
    "src/",
    "crates/volunteer/src/",
    "crates/kubernetes/src/",
    "crates/core/src/",
];

/// The names a block's entries give for one crate: the first column of its indented lines
/// (`  a.rs b/   what they are`), up to the first gap of two spaces.
fn listed_entries(block: &[&str], header: &str) -> BTreeSet<String> {
    block
        .iter()
        .skip_while(|l| !l.starts_with(header))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .flat_map(|l| {
            let names = l[2..].split("  ").next().unwrap_or("");
            names
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A crate's top-level modules as files and folders (`a.rs`, `b/`), but for its root file.
fn modules_on_disk(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            if e.file_type().unwrap().is_dir() {
                Some(format!("{name}/"))
            } else if name.ends_with(".rs") && name != "lib.rs" {
                Some(name)
            } else {
                None
            }
        })
        .collect()
}

/// The volunteer crate, whose inner layers are folders.
const VOLUNTEER: &str = "crates/volunteer/src/";
const LAYER_FOLDERS: [&str; 5] = ["observe", "decide", "act", "record", "owner"];

/// The names listed under a folder's entry (`  observe/`): its indented lines
/// (`    a.rs b/   what they are`), up to the next entry of the crate.
fn listed_in_folder(block: &[&str], header: &str, folder: &str) -> BTreeSet<String> {
    let entry = format!("  {folder}/");
    block
        .iter()
        .skip_while(|l| !l.starts_with(header))
        .skip_while(|l| !l.starts_with(&entry))
        .skip(1)
        .take_while(|l| l.starts_with("   "))
        .filter(|l| l.starts_with("    ") && !l[4..].starts_with(' '))
        .flat_map(|l| {
            let names = l[4..].split("  ").next().unwrap_or("");
            names
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_house_lists_every_module_and_only_modules_that_exist() {
    let doc = architecture();
    let block = block_after(&doc, "## The house");
    for header in LISTED {
        let listed = listed_entries(&block, header);
        let on_disk = modules_on_disk(&repo(header));
        let missing: Vec<_> = on_disk.difference(&listed).collect();
        let gone: Vec<_> = listed.difference(&on_disk).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "ARCHITECTURE.md, the house, under {header}: not listed {missing:?}; listed but not there {gone:?}"
        );
    }
    for folder in LAYER_FOLDERS {
        let listed = listed_in_folder(&block, VOLUNTEER, folder);
        let mut on_disk = modules_on_disk(&repo(VOLUNTEER).join(folder));
        on_disk.remove("mod.rs");
        let missing: Vec<_> = on_disk.difference(&listed).collect();
        let gone: Vec<_> = listed.difference(&on_disk).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "ARCHITECTURE.md, the house, under {VOLUNTEER}{folder}/: not listed {missing:?}; listed but not there {gone:?}"
        );
    }
}

/// The volunteer crate's layers as ARCHITECTURE.md's table gives them, bottom first: each
/// top-level module → its row.
fn layer_table(doc: &str) -> BTreeMap<String, usize> {
    let from = doc
        .find("### The volunteer crate's layers")
        .expect("the layer table's section");
    doc[from..]
        .lines()
        .skip_while(|l| !l.starts_with("| layer"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .enumerate()
        .flat_map(|(row, line)| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            cells
                .get(1)
                .copied()
                .unwrap_or("")
                .split(',')
                .map(|c| c.trim().trim_matches('`').to_string())
                .filter(|c| !c.is_empty())
                .map(move |m| (m, row))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The imports of `graph` that go up the layers, or sideways between two rows' modules.
fn upward(
    graph: &BTreeMap<String, BTreeSet<String>>,
    rank: &BTreeMap<String, usize>,
) -> Vec<(String, String)> {
    graph
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (from.clone(), t.clone())))
        .filter(|(from, to)| rank[to] > rank[from])
        .collect()
}

#[test]
fn the_volunteer_layers_import_only_downward() {
    let rank = layer_table(&architecture());
    let src = repo(VOLUNTEER);
    let mut modules: BTreeSet<String> = modules_on_disk(&src)
        .into_iter()
        .map(|m| m.trim_end_matches('/').trim_end_matches(".rs").to_string())
        .collect();
    // A file beside its folder (`splay.rs`, `splay/`) is one module.
    modules.retain(|m| !m.is_empty());
    assert_eq!(
        rank.keys().cloned().collect::<BTreeSet<_>>(),
        modules,
        "ARCHITECTURE.md's layer table names every top-level module of {VOLUNTEER} once"
    );
    let graph = module_imports(&src, "");
    let up = upward(&graph, &rank);
    assert!(
        up.is_empty(),
        "{VOLUNTEER}: imports against the layers: {up:?}"
    );
    // The check sees an upward import when there is one.
    let mut planted = graph.clone();
    planted
        .entry("observe".to_string())
        .or_default()
        .insert("decide".to_string());
    assert_eq!(
        upward(&planted, &rank),
        vec![("observe".to_string(), "decide".to_string())]
    );
}

/// The modules directly in `src/<inner>` (`inner` empty: the crate's top level, else a folder
/// such as `observe/`) that each one's production code names: `crate::<inner>x`, and
/// `super::x` from a file directly in that folder. Tests are left out: a test may look
/// anywhere.
fn module_imports(src: &Path, inner: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = src.join(inner);
    let modules: BTreeSet<String> = modules_on_disk(&dir)
        .into_iter()
        .map(|m| m.trim_end_matches('/').trim_end_matches(".rs").to_string())
        .filter(|m| m != "main" && m != "mod")
        .collect();
    let prefix = format!("crate::{}", inner.replace('/', "::"));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![dir.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let rel = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        // Test-only files are named so (ARCHITECTURE.md): `tests.rs`, or below a `tests` folder.
        let test_only = rel.split('/').any(|c| c == "tests" || c == "tests.rs");
        if !modules.contains(top) || !rel.ends_with(".rs") || test_only {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let production = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let mut named = |prefix: &str| {
            for (i, _) in production.match_indices(prefix) {
                if production[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let rest = &production[i + prefix.len()..];
                // `crate::{a, b::C}` names each of a group's first segments.
                let names: Vec<String> = match rest.strip_prefix('{') {
                    Some(group) => group[..group.find('}').unwrap_or(0)]
                        .split(',')
                        .map(|item| item.trim().split("::").next().unwrap_or("").to_string())
                        .collect(),
                    None => vec![
                        rest.chars()
                            .take_while(|c| {
                                c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit()
                            })
                            .collect(),
                    ],
                };
                for name in names {
                    if modules.contains(&name) && name != top {
                        graph.entry(top.to_string()).or_default().insert(name);
                    }
                }
            }
        };
        named(&prefix);
        if !rel.contains('/') {
            named("super::");
        }
    }
    graph
}

/// A circle in `graph`, if any, as the path that closes it.
fn a_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_string());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    for header in LISTED {
        let graph = module_imports(&repo(header), "");
        assert!(!graph.is_empty(), "{header}: no imports found at all");
        if let Some(circle) = a_circle(&graph) {
            panic!("{header}: an import circle: {}", circle.join(" → "));
        }
    }
    // And within each of the volunteer crate's layers.
    let src = repo(VOLUNTEER);
    for layer in LAYER_FOLDERS {
        let graph = module_imports(&src, &format!("{layer}/"));
        if let Some(circle) = a_circle(&graph) {
            panic!(
                "{VOLUNTEER}{layer}/: an import circle: {}",
                circle.join(" → ")
            );
        }
    }
}

#[test]
fn the_circle_finder_finds_a_circle() {
    // The check above would pass vacuously if it could not see one.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("contribution", "history"),
        ("history", "settings"),
        ("settings", "slot_ad"),
        ("slot_ad", "contribution"),
        ("plan", "policy"),
    ]
    .into_iter()
    .fold(BTreeMap::new(), |mut g, (a, b)| {
        g.entry(a.to_string())
            .or_insert_with(BTreeSet::new)
            .insert(b.to_string());
        g
    });
    let circle = a_circle(&graph).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 5, "{circle:?}");
    let mut acyclic = graph.clone();
    acyclic.remove("slot_ad");
    assert_eq!(a_circle(&acyclic), None);
}
