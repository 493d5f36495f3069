//! A small, strict YAML reader for the manifests an operator holds (`validate`) and the ones in
//! conf/ (the tests): the project has no YAML dependency.
//!
//! It reads the block-style subset Kubernetes manifests are written in: `---` documents,
//! `#` comments, block mappings and sequences (`- key: v` items included), plain, 'single'
//! and "double" quoted scalars, literal block scalars (`|`, `|-`, `|+`) and empty flow
//! collections (`[]`, `{}`). Anything else (anchors, tags, folded `>`, non-empty flow
//! collections, multi-line plain scalars, nesting deeper than [`MAX_DEPTH`]) is an error naming
//! the line, so a file that leaves the subset fails loudly instead of being half-read.
//! tests/shipped/conf.rs also cross-checks every file in conf/ against PyYAML when python3 has
//! it. Its input is bounded by its caller; its work is linear in the lines times the depth.

use serde_json::{Map, Value};

/// Nested collections deeper than this are refused (a Kubernetes manifest nests a dozen).
pub const MAX_DEPTH: usize = 64;

#[derive(Debug)]
pub struct YamlError {
    pub line: usize,
    pub msg: String,
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

type Res<T> = Result<T, YamlError>;

fn err<T>(line: usize, msg: impl Into<String>) -> Res<T> {
    Err(YamlError {
        line: line + 1,
        msg: msg.into(),
    })
}

/// One document of a file: its lines (1-based, the first with content to the last before
/// the next document) and what it holds.
#[derive(Debug)]
pub struct Document {
    pub first_line: usize,
    pub last_line: usize,
    pub value: Value,
}

/// Every document in `text`, as JSON values (empty documents are skipped).
pub fn parse_all(text: &str) -> Res<Vec<Value>> {
    Ok(documents(text)?.into_iter().map(|d| d.value).collect())
}

/// Every document in `text` with where it is (empty documents are skipped).
pub fn documents(text: &str) -> Res<Vec<Document>> {
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut docs = Vec::new();
    let mut start = 0;
    let mut p = Parser { lines, depth: 0 };
    for i in 0..=p.lines.len() {
        if i == p.lines.len() || p.lines[i] == "---" || p.lines[i].starts_with("--- ") {
            if let Some((first, v)) = p.document(start, i)? {
                docs.push(Document {
                    first_line: first + 1,
                    last_line: i,
                    value: v,
                });
            }
            start = i + 1;
        } else if p.lines[i] == "..." {
            return err(i, "document end marker '...' is not supported");
        }
    }
    Ok(docs)
}

struct Parser {
    lines: Vec<String>,
    /// Collections open around the one being read.
    depth: usize,
}

fn indent_of(l: &str) -> usize {
    l.len() - l.trim_start_matches(' ').len()
}

fn is_blank_or_comment(l: &str) -> bool {
    let t = l.trim_start();
    t.is_empty() || t.starts_with('#')
}

impl Parser {
    /// The document in lines `from..to`: its first content line and its value.
    fn document(&mut self, from: usize, to: usize) -> Res<Option<(usize, Value)>> {
        let Some(first) = self.next_content(from, to) else {
            return Ok(None);
        };
        let ind = indent_of(&self.lines[first]);
        let (v, end) = self.node(first, to, ind)?;
        if let Some(extra) = self.next_content(end, to) {
            return err(extra, "unexpected content (indentation?)");
        }
        Ok(Some((first, v)))
    }

    fn next_content(&self, from: usize, to: usize) -> Option<usize> {
        (from..to).find(|&i| !is_blank_or_comment(&self.lines[i]))
    }

    /// The node starting at content line `i`, whose lines are indented `ind`.
    fn node(&mut self, i: usize, to: usize, ind: usize) -> Res<(Value, usize)> {
        if self.depth >= MAX_DEPTH {
            return err(i, format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let t = &self.lines[i][ind..];
        let read = if t == "-" || t.starts_with("- ") {
            self.sequence(i, to, ind)
        } else {
            self.mapping(i, to, ind)
        };
        self.depth -= 1;
        read
    }

    fn sequence(&mut self, mut i: usize, to: usize, ind: usize) -> Res<(Value, usize)> {
        let mut items = Vec::new();
        loop {
            let Some(j) = self.next_content(i, to) else {
                return Ok((Value::Array(items), to));
            };
            let l = self.lines[j].clone();
            let li = indent_of(&l);
            if li < ind {
                return Ok((Value::Array(items), j));
            }
            let t = &l[li..];
            if li > ind || !(t == "-" || t.starts_with("- ")) {
                if li == ind {
                    return Ok((Value::Array(items), j));
                }
                return err(j, "expected a sequence item '- ' here");
            }
            let rest = t[1..].trim_start();
            if rest.is_empty() || rest.starts_with('#') {
                // The item's node is on the following, deeper lines.
                let Some(k) = self.next_content(j + 1, to) else {
                    items.push(Value::Null);
                    return Ok((Value::Array(items), to));
                };
                let ki = indent_of(&self.lines[k]);
                if ki <= ind {
                    items.push(Value::Null);
                    i = k;
                    continue;
                }
                let (v, end) = self.node(k, to, ki)?;
                items.push(v);
                i = end;
            } else if key_split(rest).is_some() {
                // "- key: value": a mapping whose first line shares the dash's line. Blank the
                // dash and read a mapping at the column of "key".
                let col = l.len() - rest.len();
                self.lines[j] = format!("{}{}", " ".repeat(col), rest);
                let (v, end) = self.node(j, to, col)?;
                items.push(v);
                i = end;
            } else {
                items.push(scalar(rest, j)?);
                i = j + 1;
            }
        }
    }

    fn mapping(&mut self, mut i: usize, to: usize, ind: usize) -> Res<(Value, usize)> {
        let mut map = Map::new();
        loop {
            let Some(j) = self.next_content(i, to) else {
                return Ok((Value::Object(map), to));
            };
            let l = self.lines[j].clone();
            let li = indent_of(&l);
            if li < ind {
                return Ok((Value::Object(map), j));
            }
            if li > ind {
                return err(j, "unexpected indentation");
            }
            let t = &l[li..];
            if t.starts_with("- ") || t == "-" {
                return Ok((Value::Object(map), j));
            }
            let Some((key, rest)) = key_split(t) else {
                return err(j, format!("expected 'key: value', got {t:?}"));
            };
            let key = match scalar(&key, j)? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            if map.contains_key(&key) {
                return err(j, format!("duplicate key {key:?}"));
            }
            let rest = rest.trim();
            let (value, end) = if rest.is_empty() || rest.starts_with('#') {
                match self.next_content(j + 1, to) {
                    Some(k) => {
                        let ki = indent_of(&self.lines[k]);
                        let kt = &self.lines[k][ki..];
                        let is_item = kt == "-" || kt.starts_with("- ");
                        if ki > ind || (ki == ind && is_item) {
                            self.node(k, to, ki)?
                        } else {
                            (Value::Null, k)
                        }
                    }
                    None => (Value::Null, to),
                }
            } else if let Some(chomp) = rest.strip_prefix('|') {
                self.block_scalar(j, to, ind, chomp)?
            } else if rest.starts_with('>') || rest.starts_with('&') || rest.starts_with('*') {
                return err(
                    j,
                    format!(
                        "unsupported YAML ({rest:?}): folded scalars, anchors and aliases are outside the subset"
                    ),
                );
            } else {
                (scalar(rest, j)?, j + 1)
            };
            map.insert(key, value);
            i = end;
        }
    }

    /// `|`, `|-`, `|+` after a key on line `j`: the more-indented lines that follow.
    fn block_scalar(&self, j: usize, to: usize, ind: usize, chomp: &str) -> Res<(Value, usize)> {
        let chomp = chomp.split('#').next().unwrap_or("").trim();
        if !matches!(chomp, "" | "-" | "+") {
            return err(
                j,
                format!("block scalar indicator |{chomp} is outside the subset"),
            );
        }
        let mut end = j + 1;
        let mut block_ind = None;
        while end < to {
            let l = &self.lines[end];
            if l.trim().is_empty() {
                end += 1;
                continue;
            }
            let li = indent_of(l);
            if li <= ind {
                break;
            }
            block_ind.get_or_insert(li);
            if li < block_ind.unwrap_or(li) {
                return err(end, "block scalar line less indented than its first line");
            }
            end += 1;
        }
        let bi = block_ind.unwrap_or(ind + 1);
        let mut text = String::new();
        for l in &self.lines[j + 1..end] {
            // A line with content is indented at least `bi` spaces; a blank one may hold other
            // whitespace, of any width.
            if let Some(rest) = l.get(bi..) {
                text.push_str(rest);
            }
            text.push('\n');
        }
        match chomp {
            "-" => {
                while text.ends_with('\n') {
                    text.pop();
                }
            }
            "" => {
                while text.ends_with("\n\n") {
                    text.pop();
                }
                if text.trim().is_empty() {
                    text.clear();
                }
            }
            _ => {}
        }
        // The lines after the scalar up to `end` are blank; hand back the first unread line.
        Ok((Value::String(text), end))
    }
}

/// `key: rest` (or `key:` at the end of the line), with the key possibly quoted.
fn key_split(t: &str) -> Option<(String, String)> {
    let bytes = t.as_bytes();
    let mut k = 0;
    if matches!(bytes.first(), Some(b'"' | b'\'')) {
        let q = bytes[0];
        k = 1;
        while k < bytes.len() && bytes[k] != q {
            k += if bytes[k] == b'\\' && q == b'"' { 2 } else { 1 };
        }
        k += 1;
    }
    let pos = t[k.min(t.len())..]
        .match_indices(':')
        .map(|(p, _)| p + k)
        .find(|&p| p + 1 == t.len() || t.as_bytes()[p + 1] == b' ')?;
    Some((t[..pos].to_owned(), t[pos + 1..].to_owned()))
}

fn scalar(s: &str, line: usize) -> Res<Value> {
    let s = s.trim();
    if let Some(body) = s.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = body.chars();
        loop {
            match chars.next() {
                None => return err(line, "unterminated \"string\""),
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    other => return err(line, format!("unsupported escape \\{other:?}")),
                },
                Some(c) => out.push(c),
            }
        }
        return trailing(chars.as_str(), line).map(|()| Value::String(out));
    }
    if let Some(body) = s.strip_prefix('\'') {
        let mut out = String::new();
        let mut rest = body;
        loop {
            match rest.find('\'') {
                None => return err(line, "unterminated 'string'"),
                Some(p) if rest[p + 1..].starts_with('\'') => {
                    out.push_str(&rest[..=p]);
                    rest = &rest[p + 2..];
                }
                Some(p) => {
                    out.push_str(&rest[..p]);
                    rest = &rest[p + 1..];
                    break;
                }
            }
        }
        return trailing(rest, line).map(|()| Value::String(out));
    }
    // A plain scalar ends at " #".
    let plain = match s.find(" #") {
        Some(p) => s[..p].trim_end(),
        None => s,
    };
    match plain {
        "[]" => return Ok(Value::Array(Vec::new())),
        "{}" => return Ok(Value::Object(Map::new())),
        _ => {}
    }
    if plain.starts_with(['[', '{', '&', '*', '!', '%', '@', '`']) {
        return err(
            line,
            format!("{plain:?}: flow collections, anchors, tags are outside the subset"),
        );
    }
    Ok(match plain {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if plain.len() > 1
                && plain.starts_with('0')
                && plain.bytes().all(|b| (b'0'..=b'7').contains(&b))
            {
                // YAML 1.1 (Kubernetes, PyYAML): 0755 is octal.
                Value::from(i64::from_str_radix(&plain[1..], 8).unwrap_or(0))
            } else if let Ok(n) = plain.parse::<i64>() {
                Value::from(n)
            } else {
                Value::String(plain.to_owned())
            }
        }
    })
}

fn trailing(rest: &str, line: usize) -> Res<()> {
    let r = rest.trim();
    if r.is_empty() || r.starts_with('#') {
        Ok(())
    } else {
        err(line, format!("text after a quoted string: {r:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset() {
        let y = "# c\na: 1\nb:\n  - x\n  - k: v\n    j: 'it''s'\nc: |\n  line1\n\n  line2\nd: \"q\\n\" # c\ne: []\n---\n- 0755\n";
        let v = parse_all(y).unwrap();
        assert_eq!(
            v[0],
            json!({"a": 1, "b": ["x", {"k": "v", "j": "it's"}], "c": "line1\n\nline2\n",
                   "d": "q\n", "e": []})
        );
        assert_eq!(v[1], json!([493]));
    }

    #[test]
    fn documents_know_their_lines() {
        let docs = documents("# head\na: 1\n---\n\nb:\n  c: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!((docs[0].first_line, docs[0].last_line), (2, 2));
        assert_eq!((docs[1].first_line, docs[1].last_line), (5, 6));
        assert_eq!(docs[1].value, json!({"b": {"c": 2}}));
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let mut text = String::new();
        for d in 0..10_000 {
            text.push_str(&" ".repeat((2 * d) % 200));
            text.push_str("- k:\n");
        }
        let e = parse_all(&text).unwrap_err();
        assert!(e.msg.contains("nested deeper"), "{e}");
        let mut deep = String::new();
        for d in 0..(MAX_DEPTH + 1) {
            deep.push_str(&format!("{}k{d}:\n", " ".repeat(d)));
        }
        assert!(parse_all(&deep).unwrap_err().msg.contains("nested deeper"));
    }

    #[test]
    fn a_blank_line_of_wide_whitespace_in_a_block_scalar_is_read_not_a_panic() {
        let v = parse_all("a: |\n  x\n \u{3000}\n  y\n").unwrap();
        assert_eq!(v[0]["a"].as_str().unwrap().lines().count(), 3);
    }
}
