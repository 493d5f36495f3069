//! The configuration reference cannot drift from the parsers: every key the plugin's NAD
//! parser and the node configuration's parsers accept is named, in backquotes, in
//! docs/configuration.md's "Configuration" and "Node configuration" sections (issue 28: "every key in the configuration
//! reference is checked against the parser by a test"). The keys come from the parsers
//! themselves: the NAD's key lists, and the fields a node-configuration struct's derive asks
//! for (`node::keys_of`), so a key added to either shows up here.
//! Nor can the docs and comments point at files that are not there (issue 48): every repository
//! path they name exists (`repository_paths_named`, below, says what counts as one).

use rdma_host_device_agent::validate::yaml;

use rdma_host_device::cni::netconf::{OTHER_KEYS, RdmaConf, SELECTOR_KEYS};
use rdma_host_device_core::node::{
    CharDevices, DeviceMetadataConfig, DevicePluginConfig, DraConfig, NicEnvConfig, NicSelectors,
    Node, Pool, Rail,
};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::Path;
use test_support as common;

/// The fields `T` accepts, as its `Deserialize` derive names them.
fn fields<T: DeserializeOwned>() -> Vec<String> {
    rdma_host_device_core::node::keys_of::<T>()
        .iter()
        .map(|k| k.to_string())
        .collect()
}

/// docs/configuration.md's text from heading `from` to the next heading of the same level.
fn section(from: &str) -> String {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let start = readme
        .find(&format!("\n{from}\n"))
        .unwrap_or_else(|| panic!("docs/configuration.md has no {from:?}"));
    let rest = &readme[start + from.len() + 2..];
    let level = from.split(' ').next().unwrap();
    let end = rest.find(&format!("\n{level} ")).unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// The keys `text` names nowhere: as `key`, as the head of `key.sub`, or as a key of a JSON
/// example (`"key":`).
fn undocumented(keys: &[String], text: &str) -> Vec<String> {
    keys.iter()
        .filter(|k| {
            !text.contains(&format!("`{k}`"))
                && !text.contains(&format!("`{k}."))
                && !text.contains(&format!("\"{k}\":"))
        })
        .cloned()
        .collect()
}

#[test]
fn every_nad_key_the_parser_accepts_is_in_the_configuration_reference() {
    let text = section("## Configuration");
    let mut keys: Vec<String> = SELECTOR_KEYS.iter().map(|k| k.to_string()).collect();
    keys.extend(OTHER_KEYS.iter().map(|k| k.to_string()));
    keys.extend(fields::<RdmaConf>().iter().map(|k| format!("rdma.{k}")));
    assert!(keys.len() > 20, "{keys:?}");
    let missing = undocumented(&keys, &text);
    assert!(
        missing.is_empty(),
        "docs/configuration.md's Configuration section does not name {missing:?}"
    );
}

#[test]
fn every_node_configuration_key_the_parser_accepts_is_in_the_reference() {
    let text = section("## Node configuration");
    let mut keys = fields::<Node>();
    assert!(keys.contains(&"stateDir".to_owned()), "{keys:?}");
    for (parent, sub) in [
        ("allowedNics", fields::<NicSelectors>()),
        ("devicePlugin", fields::<DevicePluginConfig>()),
        ("devicePlugin.pools[]", fields::<Pool>()),
        ("devicePlugin.charDevices", fields::<CharDevices>()),
        ("devicePlugin.nicEnv", fields::<NicEnvConfig>()),
        ("dra", fields::<DraConfig>()),
        ("dra.rails[]", fields::<Rail>()),
        ("dra.deviceMetadata", fields::<DeviceMetadataConfig>()),
    ] {
        assert!(!sub.is_empty(), "{parent}");
        // A nested key is named as itself in its parent's paragraph or example.
        keys.extend(sub);
    }
    let missing = undocumented(&keys, &text);
    assert!(
        missing.is_empty(),
        "docs/configuration.md's Node configuration section does not name {missing:?}"
    );
}

/// The front page's picture (docs/img/architecture.svg) is current with the DaemonSets: it
/// names both binaries and every container the two DaemonSets run, by the name in their
/// manifests.
#[test]
fn the_picture_names_every_container_the_daemonsets_run() {
    let root = env!("CARGO_MANIFEST_DIR");
    let svg = std::fs::read_to_string(format!("{root}/docs/img/architecture.svg")).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    assert!(
        readme.contains("](docs/img/architecture.svg)"),
        "README shows the picture"
    );
    let mut containers = Vec::new();
    for file in ["conf/k8s/daemonset.yaml", "conf/k8s/dra.yaml"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        for doc in yaml::parse_all(&text).unwrap() {
            if doc["kind"] != "DaemonSet" {
                continue;
            }
            assert!(
                svg.contains(&format!(
                    "DaemonSet {}",
                    doc["metadata"]["name"].as_str().unwrap()
                )),
                "the picture does not name DaemonSet {}",
                doc["metadata"]["name"]
            );
            let spec = &doc["spec"]["template"]["spec"];
            for list in ["initContainers", "containers"] {
                for c in spec[list].as_array().into_iter().flatten() {
                    containers.push(c["name"].as_str().unwrap().to_owned());
                }
            }
        }
    }
    assert!(containers.len() >= 7, "{containers:?}");
    for c in &containers {
        assert!(
            svg.contains(&format!(">{c}:")),
            "the picture does not show container {c} (as \"{c}: what it does\")"
        );
    }
    for bin in ["rdma-host-device<", "rdma-host-device-agent"] {
        assert!(svg.contains(bin), "the picture does not name {bin}");
    }
}

/// The repository's top-level entries. A token that starts with one of them, and does not
/// continue a longer word or path (`k8s.io/.../src/`, `NRI/docs/`, `$ROOT/tests/`), names a
/// path from the repository's root. Build output (`target/`) is not ours to check.
const TOP: &[&str] = &[
    "src/",
    "crates/",
    "tests/",
    "docs/",
    "conf/",
    "deploy/",
    "scripts/",
    "benches/",
    "testdata/",
    ".ci/",
];

/// The repository paths `text` names, each as written. A path starts with an entry of `TOP`
/// (after a character that cannot be part of a path) and goes on over letters, digits and
/// `_ . - + /`, so it ends at a backquote, space, quote, paren, colon (`src/lib.rs:12`,
/// `tests/attach/dhcp.rs::case`), comma or `#` (an anchor); trailing dots are the sentence's.
/// Three forms stand for more than one path and are kept whole: a glob `*` (`tests/*/main.rs`),
/// a brace list `{a,b}` (`tests/{attach,shipped}/main.rs`) and a placeholder, `<name>` or a
/// shell variable `$name` (`tests/<binary>/main.rs`, `docs/img/$p.png`); `exists` says what each
/// must match.
fn repository_paths_named(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = TOP.iter().any(|t| b[i..].starts_with(t.as_bytes()))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b"_./-$~".contains(&b[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        let word = |d: u8| d.is_ascii_alphanumeric() || d == b'_' || d == b'-';
        // The end of a group opened at `j` (`<name>`, `{a,b}`), if one is.
        let group = |j: usize, open: u8, close: u8, inside: &dyn Fn(u8) -> bool| {
            if b[j] != open {
                return None;
            }
            let k = b[j + 1..].iter().position(|&d| !inside(d))?;
            (k > 0 && b[j + 1 + k] == close).then_some(j + k + 2)
        };
        while j < b.len() {
            let c = b[j];
            // A shell variable's `$` is part of the path when a name or `{name}` follows.
            let variable = c == b'$' && b.get(j + 1).is_some_and(|&d| word(d) || d == b'{');
            if c.is_ascii_alphanumeric() || b"_.-+/*".contains(&c) || variable {
                j += 1;
            } else if let Some(end) = group(j, b'<', b'>', &word)
                .or_else(|| group(j, b'{', b'}', &|d| word(d) || d == b',' || d == b'.'))
            {
                j = end;
            } else {
                break;
            }
        }
        let path = text[i..j].trim_end_matches('.');
        found.push(path);
        i = j;
    }
    found
}

/// Whether the path as written exists in the repository at `root`. A placeholder matches any
/// name (`*`); each alternative of a brace list must exist; a component with `*` must match at
/// least one entry; a trailing `/` asks for a directory.
fn exists(root: &Path, path: &str) -> bool {
    fn glob(pat: &str, name: &str) -> bool {
        match pat.split_once('*') {
            None => pat == name,
            Some((head, tail)) => {
                name.starts_with(head)
                    && name[head.len()..]
                        .char_indices()
                        .map(|(k, _)| k)
                        .chain([name.len() - head.len()])
                        .any(|k| glob(tail, &name[head.len() + k..]))
            }
        }
    }
    fn walk(dir: &Path, parts: &[&str]) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return dir.exists();
        };
        if first.is_empty() {
            return if rest.is_empty() {
                dir.is_dir()
            } else {
                walk(dir, rest)
            };
        }
        if !first.contains('*') {
            return walk(&dir.join(first), rest);
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries
            .flatten()
            .any(|e| glob(first, &e.file_name().to_string_lossy()) && walk(&e.path(), rest))
    }
    // Placeholders first, so that `${name}` is not taken for a brace list.
    let mut p = String::new();
    let mut rest = path;
    while let Some(k) = rest.find(['<', '$']) {
        p.push_str(&rest[..k]);
        p.push('*');
        let after = &rest[k + 1..];
        rest = if rest[k..].starts_with('<') {
            &after[after.find('>').map_or(after.len(), |e| e + 1)..]
        } else {
            let after = after.strip_prefix('{').unwrap_or(after);
            let n = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let after = &after[n..];
            after.strip_prefix('}').unwrap_or(after)
        };
    }
    p.push_str(rest);
    // Then brace lists, one at a time.
    let mut alternatives = vec![p];
    while let Some(k) = alternatives.iter().position(|a| a.contains('{')) {
        let a = alternatives.remove(k);
        let (head, tail) = a.split_once('{').unwrap();
        let (list, tail) = tail.split_once('}').unwrap_or((tail, ""));
        alternatives.extend(list.split(',').map(|item| format!("{head}{item}{tail}")));
    }
    alternatives
        .iter()
        .all(|a| walk(root, &a.split('/').collect::<Vec<_>>()))
}

/// The comment of a line of Rust, from its first `//` outside a string literal.
fn rust_comment(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            // A char literal of a quote, `'"'`, opens no string.
            b'\'' if !in_string && b.get(i + 2) == Some(&b'\'') => i += 2,
            b'/' if !in_string && b.get(i + 1) == Some(&b'/') => return Some(&line[i..]),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The files whose text names repository paths, each with the part of it read, by line: every
/// Markdown file of docs/ and the README; every text file of conf/, deploy/, scripts/, tests/
/// and benches/, whole; and the comments (`//`, `//!`, `///`) of every Rust file, there and
/// under src/ and crates/. testdata/ is data, not prose.
fn prose(root: &Path) -> Vec<(String, Vec<(usize, String)>)> {
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if e.file_name() != "__pycache__" {
                    files(&p, out);
                }
            } else {
                out.push(p);
            }
        }
    }
    let mut paths = vec![root.join("README.md")];
    for dir in [
        "docs", "conf", "deploy", "scripts", "tests", "benches", "src", "crates",
    ] {
        files(&root.join(dir), &mut paths);
    }
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let rust = rel.ends_with(".rs");
        let wanted = if rel.starts_with("docs/") {
            rel.ends_with(".md")
        } else if rel.starts_with("src/") || rel.starts_with("crates/") {
            rust
        } else {
            true
        };
        if !wanted {
            continue;
        }
        // Binary files (pictures, compiled Python) are not prose.
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let lines = text
            .lines()
            .enumerate()
            .filter_map(|(n, l)| {
                let l = if rust { rust_comment(l)? } else { l };
                Some((n + 1, l.to_owned()))
            })
            .collect();
        out.push((rel, lines));
    }
    out
}

#[test]
fn the_path_reader_takes_what_a_path_is_and_nothing_else() {
    let line = "see `src/fault.rs:12` and src/flows/add.rs#L3, tests/{attach,shipped}/main.rs, \
                tests/<binary>/main.rs::<test>, docs/img/$p.png; K/pkg/src/x, $ROOT/tests/a, \
                subtests/b, tests/vm/.... and docs/.";
    assert_eq!(
        repository_paths_named(line),
        [
            "src/fault.rs",
            "src/flows/add.rs",
            "tests/{attach,shipped}/main.rs",
            "tests/<binary>/main.rs",
            "docs/img/$p.png",
            "tests/vm/",
            "docs/",
        ]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for there in [
        "tests/{attach,shipped}/main.rs",
        "tests/<binary>/main.rs",
        "docs/img/$p.png",
        "tests/cluster/build/${m}/go.mod",
        "tests/*/main.rs",
        "tests/vm/",
    ] {
        assert!(exists(root, there), "{there}");
    }
    for not_there in [
        "tests/{attach,no_such}/main.rs",
        "tests/*.no_such",
        "src/fault.rs",
        "README.md/",
    ] {
        assert!(!exists(root, not_there), "{not_there}");
    }
    assert_eq!(rust_comment(r#"let s = "a//b"; // c"#), Some("// c"));
    assert_eq!(rust_comment(r#"let q = '"'; // c"#), Some("// c"));
    assert_eq!(rust_comment(r#"let s = "http://x";"#), None);
}

/// The docs and comments name no file of this repository that is not there: the paths moved
/// when the code became three crates, and some still named where things had been (issue 48).
/// Besides the paths from the root, a relative link of a Markdown file (`[x](img/y.png)`)
/// must reach a file from where that file is.
#[test]
fn every_repository_path_the_docs_and_comments_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut missing = Vec::new();
    for (file, lines) in prose(root) {
        let dir = Path::new(&file).parent().unwrap_or(Path::new(""));
        for (n, line) in &lines {
            for path in repository_paths_named(line) {
                checked += 1;
                if !exists(root, path) {
                    missing.push(format!("{file}:{n}: {path}"));
                }
            }
            if !file.ends_with(".md") {
                continue;
            }
            for link in line.split("](").skip(1) {
                let target = link.split([')', ' ', '#']).next().unwrap_or("");
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                if !root.join(dir).join(target).exists() {
                    missing.push(format!("{file}:{n}: ]({target}) (from {})", dir.display()));
                }
            }
        }
    }
    assert!(
        checked > 500,
        "only {checked} paths read: the reader finds too few"
    );
    assert!(
        missing.is_empty(),
        "{} paths named in docs or comments do not exist (name where the thing is now, or \
         reword):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The test binaries, each with the directory of its modules.
const TEST_BINARIES: &[(&str, &str)] = &[
    ("attach", "tests/attach"),
    ("confinement", "tests/confinement"),
    ("give_back", "tests/give_back"),
    ("runtimes", "tests/runtimes"),
    ("shipped", "tests/shipped"),
    ("node_agent", "crates/agent/tests/node_agent"),
    ("real_cluster", "crates/agent/tests/real_cluster"),
];

/// The tests `text` names as `binary::module::test`, each as (binary, module, test). A name
/// that ends in `*` stands for the tests it begins (`*` alone: every test of the module).
fn tests_named(text: &str) -> Vec<(&str, &str, &str)> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (binary, _) in TEST_BINARIES {
        let head = format!("{binary}::");
        let mut from = 0;
        while let Some(k) = text[from..].find(&head) {
            let at = from + k;
            from = at + head.len();
            if text[..at].ends_with(|c: char| word(c) || c == ':') {
                continue;
            }
            let rest = &text[from..];
            let module_len = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            let Some(after) = rest[module_len..].strip_prefix("::") else {
                continue;
            };
            let mut test_len = after.find(|c: char| !word(c)).unwrap_or(after.len());
            if after[test_len..].starts_with('*') {
                test_len += 1;
            }
            if module_len > 0 && test_len > 0 {
                found.push((*binary, &rest[..module_len], &after[..test_len]));
            }
        }
    }
    found
}

/// Every test binary's tests: (binary, module) -> its `#[test]` functions.
fn tests_of_binaries(root: &Path) -> BTreeMap<(&'static str, String), Vec<String>> {
    let mut tests = BTreeMap::new();
    for (binary, dir) in TEST_BINARIES {
        for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(module) = name.strip_suffix(".rs") else {
                continue;
            };
            let text = std::fs::read_to_string(e.path()).unwrap();
            let mut fns = Vec::new();
            let mut lines = text.lines().map(str::trim);
            while let Some(l) = lines.next() {
                if l != "#[test]" {
                    continue;
                }
                // The test's fn, after any other attribute.
                if let Some(f) = lines.find(|l| !l.starts_with("#[")) {
                    let f = f.trim_start_matches("fn ");
                    fns.push(f[..f.find('(').unwrap_or(f.len())].to_owned());
                }
            }
            tests.insert((*binary, module.to_owned()), fns);
        }
    }
    tests
}

/// Whether `test` (a name, or the start of names before a `*`) is a test of the module.
fn is_a_test(fns: Option<&Vec<String>>, test: &str) -> bool {
    fns.is_some_and(|fns| {
        fns.iter().any(|f| match test.strip_suffix('*') {
            Some(prefix) => f.starts_with(prefix),
            None => f == test,
        })
    })
}

/// The docs and comments cite tests as their proof (docs/trust.md's and
/// docs/attack-review.md's last column): each test named as `binary::module::test` is a
/// `#[test]` of that module, so a test renamed or moved cannot leave a row proving nothing.
/// The code's own `give_back` (src/flows/give_back/) shares the binary's name: a path into it
/// names one of its modules.
#[test]
fn every_test_the_docs_and_comments_name_exists() {
    assert_eq!(
        tests_named("`give_back::home::a_b`, attach::libcni::gc_v110_* and x::attach::y::z"),
        [
            ("attach", "libcni", "gc_v110_*"),
            ("give_back", "home", "a_b")
        ]
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tests = tests_of_binaries(root);
    let mut checked = 0;
    let mut missing = Vec::new();
    for (file, lines) in prose(root) {
        for (n, line) in &lines {
            for (binary, module, test) in tests_named(line) {
                if binary == "give_back" && root.join("src/flows/give_back").join(module).exists() {
                    continue;
                }
                checked += 1;
                if !is_a_test(tests.get(&(binary, module.to_owned())), test) {
                    missing.push(format!("{file}:{n}: {binary}::{module}::{test}"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} tests named: the reader finds too few"
    );
    assert!(
        missing.is_empty(),
        "{} tests named in docs or comments are not tests of that module:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// docs/trust.md names, for each row, the test that shows it: `binary::module::test` (which
/// the test above holds to the suite) or `unit: name`, a unit test in src/ or crates/, which
/// must exist too. A table that names too few tests has lost its last column.
#[test]
fn the_trust_table_names_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/trust.md")).unwrap();
    let src = common::files_under(&root.join("src"))
        .into_iter()
        .chain(common::files_under(&root.join("crates")))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect::<String>();
    let mut named = 0;
    for cell in doc.split('`').skip(1).step_by(2) {
        if let Some(n) = cell.strip_prefix("unit: ") {
            let name = n.split("::").last().unwrap_or(n);
            let found = match name.strip_suffix('*') {
                Some(prefix) => src.contains(&format!("fn {prefix}")),
                None => src.contains(&format!("fn {name}(")),
            };
            assert!(found, "docs/trust.md names {cell}, which is not a test");
            named += 1;
        } else {
            named += tests_named(cell).len();
        }
    }
    assert!(
        named > 40,
        "only {named} test references found in docs/trust.md"
    );
}
